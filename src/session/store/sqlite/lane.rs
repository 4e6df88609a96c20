//! The writer lane: the one writer connection, shared by every thread that writes, with
//! group commit.
//!
//! Each [`WriterLane::write`] runs its closure inside a `SAVEPOINT` of an open
//! `BEGIN IMMEDIATE` transaction, one closure at a time, in arrival order (an eventually
//! fair lock). When nobody else is waiting for the lane (or the batch is full), the writer
//! that just finished commits the transaction; otherwise it leaves the commit to the last
//! writer of the group. Every writer returns only after the commit that includes it, so an
//! `Ok` still means "durable"; a closure that fails rolls back its savepoint alone and
//! returns at once. Under contention one fsync serves several appends, which is why
//! four busy writers keep pace with direct rusqlite while the longest wait stays short
//! (`cargo run --release --example bench -- store`).

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use rusqlite::Connection;

use crate::session::store::error::{Result, StoreError};

/// The most closures one commit may carry: bounds how long the first of them waits.
pub const GROUP_COMMIT_MAX_WRITES: usize = 64;

/// One transaction shared by a group of writers, and how it ended.
struct Batch {
    outcome: Mutex<Option<Result<(), String>>>,
    done: Condvar,
}

impl Batch {
    fn new() -> Batch {
        Batch {
            outcome: Mutex::new(None),
            done: Condvar::new(),
        }
    }

    fn finish(&self, outcome: Result<(), String>) {
        *self.outcome.lock().unwrap_or_else(PoisonError::into_inner) = Some(outcome);
        self.done.notify_all();
    }

    fn wait(&self) -> Result<()> {
        let mut outcome = self.outcome.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(o) = outcome.as_ref() {
                return o.clone().map_err(StoreError::CommitFailed);
            }
            outcome = self
                .done
                .wait(outcome)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

struct LaneState {
    conn: Connection,
    /// The open transaction, if a group is being collected.
    open: Option<Arc<Batch>>,
    writes_in_batch: usize,
}

/// The one writer connection and its group commit.
pub struct WriterLane {
    state: parking_lot::Mutex<LaneState>,
    /// Threads that want the lane and do not hold it yet.
    waiting: AtomicUsize,
    /// Transactions committed so far: the maintenance thread checkpoints after them.
    commits: AtomicU64,
}

impl WriterLane {
    pub fn new(conn: Connection) -> WriterLane {
        WriterLane {
            state: parking_lot::Mutex::new(LaneState {
                conn,
                open: None,
                writes_in_batch: 0,
            }),
            waiting: AtomicUsize::new(0),
            commits: AtomicU64::new(0),
        }
    }

    /// How many transactions this lane has committed.
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Runs `f` while holding the lane with no transaction open: no writer commits until
    /// it returns. A group left open for this thread is committed first. For work that
    /// must not race a commit (the end of a checkpoint, so the next writer can restart
    /// the WAL), and that must be short: every writer waits for it.
    pub fn exclusive<T>(&self, f: impl FnOnce() -> T) -> T {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut st = self.state.lock();
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        if let Some(b) = st.open.take() {
            let committed = commit(&st.conn);
            if committed.is_ok() {
                self.commits.fetch_add(1, Ordering::Relaxed);
            }
            b.finish(committed);
        }
        f()
    }

    /// Runs `f` on the writer connection inside a savepoint of the group transaction;
    /// returns once that transaction is committed (or `f`'s own error at once).
    pub fn write<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut st = self.state.lock();
        self.waiting.fetch_sub(1, Ordering::SeqCst);

        if st.open.is_none() {
            st.conn.execute_batch("BEGIN IMMEDIATE")?;
            st.open = Some(Arc::new(Batch::new()));
            st.writes_in_batch = 0;
        }
        let batch = st.open.clone();
        // From here every path reaches the commit decision below, so writers already in
        // the group are never left waiting.
        let result = catch_unwind(AssertUnwindSafe(|| in_savepoint(&st.conn, f)));
        if matches!(result, Ok(Ok(_))) {
            st.writes_in_batch += 1;
        }
        let last_of_group = self.waiting.load(Ordering::SeqCst) == 0
            || st.writes_in_batch >= GROUP_COMMIT_MAX_WRITES;
        if last_of_group {
            let committed = commit(&st.conn);
            if committed.is_ok() {
                self.commits.fetch_add(1, Ordering::Relaxed);
            }
            if let Some(b) = st.open.take() {
                b.finish(committed);
            }
        }
        drop(st);

        match result {
            Err(panic) => resume_unwind(panic),
            Ok(Err(e)) => Err(e),
            Ok(Ok(value)) => {
                if let Some(b) = batch {
                    b.wait()?;
                }
                Ok(value)
            }
        }
    }
}

/// Commits the open transaction. A failed COMMIT may leave it open; nothing of it stands.
fn commit(conn: &Connection) -> Result<(), String> {
    let committed = conn.execute_batch("COMMIT").map_err(|e| e.to_string());
    if committed.is_err() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    committed
}

/// Runs `f` in a savepoint: released on success, rolled back (alone) on error or panic.
fn in_savepoint<T>(conn: &Connection, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
    conn.execute_batch("SAVEPOINT brain_write")?;
    struct Undo<'c>(&'c Connection, bool);
    impl Drop for Undo<'_> {
        fn drop(&mut self) {
            if self.1 {
                let _ = self
                    .0
                    .execute_batch("ROLLBACK TO brain_write; RELEASE brain_write");
            }
        }
    }
    let mut undo = Undo(conn, true);
    let out = f(conn)?;
    conn.execute_batch("RELEASE brain_write")?;
    undo.1 = false;
    Ok(out)
}
