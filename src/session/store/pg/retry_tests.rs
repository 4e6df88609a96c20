//! Connections lost under the PostgreSQL store (issue 27): backends terminated from an
//! admin connection between writes, inside a write and at its commit; every write either
//! succeeds once or is `Unavailable`, never another error, never written twice.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};

use super::retry::{COMMIT_STATUS_WAIT, connection_lost};
use super::testdb::{self, TestDb};
use super::*;
use crate::session::events::{Payload, UserMessage};
use crate::session::store::seam::Store;

const OTHERS: &str = "SELECT pid FROM pg_stat_activity
                      WHERE datname = current_database() AND pid <> pg_backend_pid()";

/// The pids of every other connection to the test database.
fn others(admin: &mut Client) -> Vec<i32> {
    admin
        .query(OTHERS, &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Ends every connection to the test database but `admin`'s, and waits until those
/// backends are gone (a restart as brain's pools see it). Only the pids seen now are
/// waited for: a pool may open fresh connections meanwhile (r2d2 keeps its idle minimum).
fn terminate_all(admin: &mut Client) {
    let pids = others(admin);
    terminate_now(admin);
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let alive: Vec<i32> = others(admin)
            .into_iter()
            .filter(|p| pids.contains(p))
            .collect();
        if alive.is_empty() {
            return;
        }
        assert!(Instant::now() < until, "the backends {alive:?} did not end");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Signals every other backend of the test database to end, without waiting.
fn terminate_now(admin: &mut Client) {
    admin
        .execute(
            &format!("SELECT pg_terminate_backend(pid) FROM ({OTHERS}) o"),
            &[],
        )
        .expect("terminates the backends");
}

/// A fresh database (dropped with the first), a store on it with one session, and an
/// admin connection; `None` when the PostgreSQL tests are skipped.
fn setup(test: &str) -> Option<(TestDb, Store, Client, SessionId)> {
    let db = testdb::fresh(test)?;
    let store = Store::from_backend(PgStore::open(&db.url, StoreOptions::default()).unwrap());
    let admin = Client::connect(&db.url, NoTls).unwrap();
    let id = store.create_session(None, "sys".into()).unwrap().id;
    Some((db, store, admin, id))
}

fn message(text: &str) -> Payload {
    Payload::UserMessage(UserMessage { text: text.into() })
}

/// I1: the session's seqs are 1, 2, 3… with no gap and no repeat.
fn gapless(store: &Store, id: SessionId) {
    let seqs: Vec<u64> = store
        .events(id, 0, None)
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "I1");
}

/// How many of the session's events carry `text`.
fn copies(store: &Store, id: SessionId, text: &str) -> usize {
    let payload = message(text).to_json();
    store
        .events(id, 0, None)
        .unwrap()
        .iter()
        .filter(|e| e.payload == payload)
        .count()
}

/// The failing-before test: a write and a read after every backend of the pools was
/// terminated answered `PostgreSQL error: … terminating connection` (500 `internal`).
#[test]
fn writes_and_reads_after_the_pools_backends_were_terminated_succeed_once() {
    let Some((_db, store, mut admin, id)) =
        setup("writes_and_reads_after_the_pools_backends_were_terminated")
    else {
        return;
    };
    for round in 0..6 {
        // Several pooled connections at once, so more than one is dead afterwards.
        std::thread::scope(|s| {
            for i in 0..3 {
                let store = &store;
                s.spawn(move || store.append(id, &message(&format!("warm {round} {i}"))));
            }
        });
        terminate_all(&mut admin);
        let text = format!("after kill {round}");
        store
            .append(id, &message(&text))
            .unwrap_or_else(|e| panic!("round {round}: {e:?}"));
        assert_eq!(copies(&store, id, &text), 1, "round {round}");
        terminate_all(&mut admin);
        assert!(store.last_seq(id).unwrap() > 1, "a read after the kill");
    }
    gapless(&store, id);
}

/// Lost while its closure ran, the write runs again on a fresh connection: written once.
/// A closure that may run only once is `Unavailable` instead, and nothing is written.
#[test]
fn a_write_whose_connection_is_lost_inside_it_runs_again_once_or_is_unavailable() {
    let Some((_db, store, mut admin, id)) = setup("a_write_whose_connection_is_lost_inside_it")
    else {
        return;
    };
    let mut runs = 0;
    store
        .write(|w| {
            runs += 1;
            w.append(id, &message("first"))?;
            if runs == 1 {
                terminate_all(&mut admin);
            }
            w.append(id, &message("second"))
        })
        .expect("written on a fresh connection");
    assert_eq!(runs, 2);
    assert_eq!(
        (copies(&store, id, "first"), copies(&store, id, "second")),
        (1, 1)
    );

    let e = store
        .write_once(|w| {
            w.append(id, &message("once"))?;
            terminate_all(&mut admin);
            w.append(id, &message("once more"))
        })
        .unwrap_err();
    assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
    assert_eq!(copies(&store, id, "once"), 0);
    assert_eq!(store.last_seq(id).unwrap(), 3);
}

/// Lost at its `COMMIT` (the closure done, the connection gone before the commit's
/// answer): the transaction's status decides. Rolled back here, so it runs again: once.
#[test]
fn a_write_whose_commit_is_lost_is_looked_up_and_written_once() {
    let Some((_db, store, mut admin, id)) = setup("a_write_whose_commit_is_lost") else {
        return;
    };
    let mut runs = 0;
    let seq = store
        .write(|w| {
            runs += 1;
            let e = w.append(id, &message("at the commit"))?;
            if runs == 1 {
                terminate_all(&mut admin);
            }
            Ok(e.seq)
        })
        .expect("written");
    assert_eq!((runs, seq), (2, 2));
    assert_eq!(copies(&store, id, "at the commit"), 1);
}

/// `txid_status` tells a committed transaction from one rolled back with its connection,
/// and one still running past [`COMMIT_STATUS_WAIT`] is unknown (`Unavailable`).
#[test]
fn a_lost_commit_is_settled_by_its_transaction_status() {
    let Some(db) = testdb::fresh("a_lost_commit_is_settled_by_its_transaction_status") else {
        return;
    };
    let mut admin = Client::connect(&db.url, NoTls).unwrap();
    let xid = |c: &mut Client| -> i64 {
        c.batch_execute("BEGIN").unwrap();
        c.query_one("SELECT txid_current()", &[]).unwrap().get(0)
    };
    let mut other = Client::connect(&db.url, NoTls).unwrap();
    let committed = xid(&mut other);
    other.batch_execute("COMMIT").unwrap();
    assert!(retry::settled(&mut admin, committed, "test").unwrap());
    let running = xid(&mut other);
    let started = Instant::now();
    let e = retry::settled(&mut admin, running, "test").unwrap_err();
    assert!(matches!(e, StoreError::Unavailable(_)), "{e:?}");
    assert!(started.elapsed() >= COMMIT_STATUS_WAIT);
    terminate_all(&mut admin);
    assert!(!retry::settled(&mut admin, running, "test").unwrap());
}

/// Backends terminated over and over while writers write: each write is acknowledged
/// once or answered `Unavailable`; no other error, nothing acknowledged lost, nothing twice.
#[test]
fn writes_under_repeated_backend_kills_are_written_once_or_unavailable() {
    let Some((_db, store, mut admin, id)) = setup("writes_under_repeated_backend_kills") else {
        return;
    };
    let done = Arc::new(AtomicBool::new(false));
    let killer = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            let mut kills = 0;
            while !done.load(Ordering::SeqCst) {
                terminate_now(&mut admin);
                kills += 1;
                std::thread::sleep(Duration::from_millis(15));
            }
            kills
        })
    };
    let outcomes: Vec<(String, Result<()>)> = std::thread::scope(|s| {
        let writers: Vec<_> = (0..3)
            .map(|w| {
                let store = &store;
                s.spawn(move || {
                    (0..40)
                        .map(|i| {
                            let text = format!("w{w} m{i}");
                            let r = store.append(id, &message(&text)).map(|_| ());
                            (text, r)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        writers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    done.store(true, Ordering::SeqCst);
    let kills = killer.join().unwrap();
    let mut acked = 0;
    for (text, r) in &outcomes {
        match r {
            Ok(()) => {
                acked += 1;
                assert_eq!(copies(&store, id, text), 1, "{text} acknowledged");
            }
            Err(StoreError::Unavailable(_)) => assert!(copies(&store, id, text) <= 1, "{text}"),
            Err(e) => panic!("{text}: {e:?} (after {kills} kills)"),
        }
    }
    assert!(acked > 0 && kills > 0, "acked {acked}, kills {kills}");
    gapless(&store, id);
}

#[test]
fn a_terminated_backend_is_a_lost_connection_and_a_bad_statement_is_not() {
    let Some(db) = testdb::fresh("a_terminated_backend_is_a_lost_connection") else {
        return;
    };
    let mut admin = Client::connect(&db.url, NoTls).unwrap();
    let mut victim = Client::connect(&db.url, NoTls).unwrap();
    let bad = victim
        .batch_execute("SELECT * FROM no_such_table")
        .unwrap_err();
    assert!(!connection_lost(&bad), "{bad}");
    terminate_all(&mut admin);
    let lost = victim.batch_execute("SELECT 1").unwrap_err();
    assert!(connection_lost(&lost), "{lost}");
}

/// Review of issue 28: a write whose closure panics (a bug, a failed assertion) left its
/// transaction open on a pooled connection, and the next write on that connection
/// committed it. Now the panic rolls it back: nothing of it is ever committed.
#[test]
fn a_write_that_panics_is_rolled_back_before_its_connection_is_reused() {
    let Some((_db, store, _admin, id)) = setup("a_write_that_panics_is_rolled_back") else {
        return;
    };
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        store.write(|w| -> crate::session::store::Result<()> {
            w.append(id, &message("lost"))?;
            panic!("a bug inside a write");
        })
    }));
    assert!(panicked.is_err());
    for i in 0..=super::WRITE_CONNECTIONS {
        store.append(id, &message(&format!("kept {i}"))).unwrap();
    }
    let events = store.events(id, 0, None).unwrap();
    assert!(
        !events.iter().any(|e| e.payload.contains("lost")),
        "{events:?}"
    );
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
}
