//! WAL checkpoints off the writer (issue 19): the store's maintenance thread checkpoints on
//! its own connection and empties the WAL when writes stop; a reader's snapshot stays whole
//! while writes and checkpoints go on. (Real process death during checkpoints:
//! `crash::sigkill_while_checkpoints_run_loses_nothing_committed`.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use brain::session::store::sqlite::maintenance::{CHECKPOINT_INTERVAL, WAL_IDLE};

use crate::support::*;

/// Generous next to the thread's own timings (a second or two), on a busy machine.
const CHECKPOINT_DEADLINE: Duration = Duration::from_secs(20);

fn file_len(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

fn wal_path(db: &TempDb) -> std::path::PathBuf {
    let mut p = db.path().into_os_string();
    p.push("-wal");
    p.into()
}

#[test]
fn the_wal_is_emptied_once_writes_stop() {
    let db = TempDb::new();
    let store = db.open();
    let id = store.create_session(None, "sys".into()).unwrap().id;
    for i in 0..300 {
        store.append(id, &user(&format!("message {i}"))).unwrap();
    }
    assert!(file_len(&wal_path(&db)) > 0, "the appends went to the WAL");
    wait_for(
        "the idle WAL is truncated",
        CHECKPOINT_DEADLINE + WAL_IDLE,
        || file_len(&wal_path(&db)) == 0,
    );
    // Everything is in the database file now, and still readable through the store.
    assert_eq!(store.events(id, 0, None).unwrap().len(), 301);
}

/// What a reader sees of the log: its size and a digest of its bytes.
fn snapshot(conn: &rusqlite::Connection) -> (i64, i64, String) {
    conn.query_row(
        "SELECT COUNT(*), COALESCE(SUM(length(payload)), 0), COALESCE(MAX(created_at), '')
         FROM session_events",
        [],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
    .unwrap()
}

#[test]
fn a_reader_snapshot_stays_whole_while_writes_and_checkpoints_go_on() {
    let db = TempDb::new();
    let store = Arc::new(db.open());
    let db_len_before = file_len(&db.path());
    let id = store.create_session(None, "sys".into()).unwrap().id;
    // One transaction, so the reader starts well before the first checkpoint is due.
    store
        .write(|w| {
            for i in 0..200 {
                w.append(id, &user(&format!("before the reader {i}")))?;
            }
            Ok(())
        })
        .unwrap();

    let reader = db.raw();
    reader.execute_batch("BEGIN").unwrap();
    let seen = snapshot(&reader);

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (store, stop) = (Arc::clone(&store), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::SeqCst) {
                store
                    .append(id, &user(&format!("after the reader {n}")))
                    .unwrap();
                n += 1;
            }
            n
        })
    };
    // A checkpoint ran (the writer never checkpoints, so the database file grows only by
    // the maintenance thread's copies) while the reader kept its snapshot.
    wait_for(
        "a background checkpoint copies pages",
        CHECKPOINT_DEADLINE + CHECKPOINT_INTERVAL,
        || {
            assert_eq!(snapshot(&reader), seen, "the reader's snapshot moved");
            file_len(&db.path()) > db_len_before
        },
    );
    stop.store(true, Ordering::SeqCst);
    let appended = writer.join().unwrap();
    assert_eq!(snapshot(&reader), seen, "the reader's snapshot moved");
    reader.execute_batch("COMMIT").unwrap();

    let events = store.events(id, 0, None).unwrap();
    assert_eq!(events.len() as u64, 1 + 200 + appended, "an event was lost");
    assert_gapless(&events.iter().map(|e| e.seq).collect::<Vec<_>>());
    // Once the reader is gone, the WAL empties.
    wait_for(
        "the idle WAL is truncated",
        CHECKPOINT_DEADLINE + WAL_IDLE,
        || file_len(&wal_path(&db)) == 0,
    );
    let integrity: String = db
        .raw()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    assert_eq!(snapshot(&db.raw()).0, 1 + 200 + appended as i64);
}
