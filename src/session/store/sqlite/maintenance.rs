//! The store's background thread (writer stores only): it purges deleted sessions in
//! small transactions ([`super::purge`]) and checkpoints the WAL on its own connection, so
//! neither happens inside a commit (issue 19, "the writer off the slow path").
//!
//! Checkpoints: the writer's auto-checkpoint is off (`wal_autocheckpoint=0`, else SQLite
//! checkpoints on the committing writer every 1,000 pages). While commits go on, this
//! thread runs `PASSIVE` at most every [`CHECKPOINT_INTERVAL`]: it copies what no reader
//! still needs and never waits for anyone. A `PASSIVE` that raced commits leaves a tail,
//! and SQLite restarts the WAL from its beginning only when the whole of it is copied, so
//! past [`WAL_RESTART_FRAMES`] the tail is copied again while holding the writer lane
//! (only what was committed during the first pass); the next writer then
//! starts the WAL over and `journal_size_limit` cuts the file back to
//! [`WAL_SIZE_LIMIT_BYTES`]. After [`WAL_IDLE`] without a commit, a `PASSIVE` pass and then
//! `TRUNCATE` (holding the lane, so no writer waits in SQLite's busy handler) empty the file.
//!
//! A reader holding one snapshot forever (an open `sqlite3` shell transaction; brain's own
//! reads are one short transaction each) stops every checkpoint at the frames its snapshot
//! needs: nothing is lost, the reader keeps its consistent view, but the WAL grows until it
//! ends; a warning says so past [`WAL_WARN_FRAMES`]. The checkpoint connection never
//! waits (busy timeout 0): a blocked `TRUNCATE` just tries again later.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::lane::WriterLane;
use super::purge::{PURGE_BATCH_EVENTS, pending, purge_batch};
use crate::session::store::error::{Result, StoreError};
use crate::session::store::types::Checkpoints;

/// How long a shutdown waits for the thread ([`Maintenance::stop_within`]): one batch or
/// checkpoint takes far less, unless it waits for the writer lane.
pub const STOP_WAIT: Duration = Duration::from_millis(500);

/// How often the thread looks at the WAL when it has nothing else to do.
pub const MAINTENANCE_TICK: Duration = Duration::from_millis(100);

/// The most often a `PASSIVE` checkpoint runs while commits go on: bounds the WAL to
/// about one interval of writes (plus what readers still need).
pub const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);

/// Past this many frames (16 KiB pages, [`super::schema::PAGE_SIZE_BYTES`]: 64 MiB; a
/// database made before V8 keeps 4 KiB pages: 16 MiB) in the WAL, a checkpoint finishes its tail
/// holding the writer lane so that the WAL can start over. Below it, the WAL starts over
/// by itself whenever one `PASSIVE` pass meets no commit (any pause in the appends), so
/// only sustained back-to-back writing reaches it; the tail's copy and fsync then hold the
/// writer (27–75 ms at 4,096 frames on a loaded machine: `bench writer`), rarely.
pub const WAL_RESTART_FRAMES: i64 = 4_096;

/// Past this many frames the WAL is growing because a reader pins an old snapshot.
pub const WAL_WARN_FRAMES: i64 = 4 * WAL_RESTART_FRAMES;

/// No commit for this long: the WAL is emptied (`TRUNCATE`).
pub const WAL_IDLE: Duration = Duration::from_secs(1);

/// The size the WAL file is cut back to when it starts over (`journal_size_limit`).
pub const WAL_SIZE_LIMIT_BYTES: i64 = 64 * 1024 * 1024;

#[derive(Default)]
struct Control {
    stop: bool,
    purge: bool,
}

#[derive(Default)]
struct Shared {
    control: Mutex<Control>,
    wake: Condvar,
    /// The longest a checkpoint held the writer lane, in nanoseconds (for the benchmark).
    longest_hold_ns: AtomicU64,
}

impl Shared {
    fn update(&self, f: impl FnOnce(&mut Control)) {
        f(&mut self.control.lock().unwrap_or_else(PoisonError::into_inner));
        self.wake.notify_all();
    }
}

/// The running thread; stopped (and joined) by [`Maintenance::stop`] or on drop.
pub struct Maintenance {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Maintenance {
    /// Starts the thread. `conn` is its own connection to the database.
    pub fn start(
        lane: Arc<WriterLane>,
        conn: Connection,
        checkpoints: Checkpoints,
    ) -> Result<Maintenance> {
        conn.busy_timeout(Duration::ZERO)?;
        let shared = Arc::new(Shared::default());
        // Purges cut short by a crash or a shutdown resume now.
        shared.update(|c| c.purge = true);
        let worker = Worker {
            lane,
            conn,
            checkpoints,
            queue: Vec::new(),
            seen_commits: u64::MAX,
            last_commit: Instant::now(),
            last_checkpoint: Instant::now(),
            unchecked: true,
            untruncated: true,
        };
        let thread = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name("brain-store-maintenance".into())
                .spawn(move || worker.run(&shared))
                .map_err(|e| StoreError::Corrupt(format!("cannot start a thread: {e}")))?
        };
        Ok(Maintenance {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The longest any checkpoint of this thread held the writer lane so far.
    pub fn longest_hold(&self) -> Duration {
        Duration::from_nanos(self.shared.longest_hold_ns.load(Ordering::Relaxed))
    }

    /// A session was deleted: purge it soon.
    pub fn purge_soon(&self) {
        self.shared.update(|c| c.purge = true);
    }

    /// Stops the thread and waits for it: at most one purge batch or one checkpoint.
    pub fn stop(&self) {
        self.stop_within(Duration::MAX);
    }

    /// Stops the thread and waits for it at most `wait`; past that it is left running to
    /// the exit. A checkpoint waiting for the writer lane behind a write that waits for
    /// another process's lock would otherwise hold a shutdown past SPEC §12's 10 s.
    pub fn stop_within(&self, wait: Duration) {
        self.shared.update(|c| c.stop = true);
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(t) = thread else { return };
        let until = Instant::now().checked_add(wait);
        while !t.is_finished() && until.is_none_or(|u| Instant::now() < u) {
            std::thread::sleep(Duration::from_millis(10));
        }
        if t.is_finished() {
            let _ = t.join();
        } else {
            log::warn!("the store's maintenance is still waiting for the writer: left to the exit");
        }
    }
}

impl Drop for Maintenance {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Worker {
    lane: Arc<WriterLane>,
    conn: Connection,
    checkpoints: Checkpoints,
    /// Deleted sessions still to purge, the current one last.
    queue: Vec<String>,
    seen_commits: u64,
    last_commit: Instant,
    last_checkpoint: Instant,
    /// Commits since the last checkpoint.
    unchecked: bool,
    /// The WAL may hold frames (not truncated since the last commit).
    untruncated: bool,
}

impl Worker {
    fn run(mut self, shared: &Shared) {
        loop {
            let purge = {
                let mut c = shared
                    .control
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if c.stop {
                    drop(c);
                    self.optimize();
                    return;
                }
                std::mem::take(&mut c.purge)
            };
            if purge && let Err(e) = self.find_purges() {
                log::warn!("cannot list the sessions waiting for their purge: {e}");
            }
            let busy = match self.purge_step() {
                Ok(more) => more,
                Err(e) => {
                    // Tried again at the next delete or the next open.
                    log::warn!("a session's purge failed (it resumes later): {e}");
                    self.queue.clear();
                    false
                }
            };
            if self.checkpoints == Checkpoints::Background
                && let Err(e) = self.checkpoint_step(shared)
            {
                log::warn!("a WAL checkpoint failed: {e}");
            }
            if busy {
                continue;
            }
            let c = shared
                .control
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !c.stop && !c.purge {
                let _ = shared
                    .wake
                    .wait_timeout(c, MAINTENANCE_TICK)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        }
    }

    /// `PRAGMA optimize` as the store closes, as SQLite advises for long-lived
    /// connections: it gathers planner statistics only where a query of this connection's
    /// life would have used them. On the 10M-event corpus it found none to gather (no
    /// `sqlite_stat1`; the statements name their indexes), so it costs nothing today and
    /// keeps the plans right if a later query starts to need statistics. Best effort: this
    /// connection never waits for a lock, and a busy database just skips it.
    fn optimize(&self) {
        if let Err(e) = self.conn.execute_batch("PRAGMA optimize") {
            log::debug!("PRAGMA optimize skipped: {e}");
        }
    }

    fn find_purges(&mut self) -> Result<()> {
        for id in pending(&self.conn)?.into_iter().rev() {
            if !self.queue.contains(&id) {
                self.queue.insert(0, id);
            }
        }
        Ok(())
    }

    /// One batch of the current purge; whether any work is left.
    fn purge_step(&mut self) -> Result<bool> {
        let Some(id) = self.queue.last() else {
            return Ok(false);
        };
        if self
            .lane
            .write(|c| purge_batch(c, id, PURGE_BATCH_EVENTS))?
        {
            self.queue.pop();
        }
        Ok(!self.queue.is_empty())
    }

    /// Runs one checkpoint of `mode` holding the writer lane, and records how long.
    fn checkpoint_holding_lane(&self, shared: &Shared, mode: &str) -> Result<CheckpointOutcome> {
        self.lane.exclusive(|| {
            let started = Instant::now();
            let outcome = checkpoint(&self.conn, mode);
            let held = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
            shared.longest_hold_ns.fetch_max(held, Ordering::Relaxed);
            outcome
        })
    }

    fn checkpoint_step(&mut self, shared: &Shared) -> Result<()> {
        let now = Instant::now();
        let commits = self.lane.commits();
        if commits != self.seen_commits {
            self.seen_commits = commits;
            self.last_commit = now;
            self.unchecked = true;
            self.untruncated = true;
        }
        if self.unchecked && now.duration_since(self.last_checkpoint) >= CHECKPOINT_INTERVAL {
            self.last_checkpoint = now;
            self.unchecked = false;
            let first = checkpoint(&self.conn, "PASSIVE")?;
            if first.frames >= WAL_RESTART_FRAMES && first.copied < first.frames {
                let tail = self.checkpoint_holding_lane(shared, "PASSIVE")?;
                if tail.frames >= WAL_WARN_FRAMES && tail.copied < tail.frames {
                    log::warn!(
                        "the WAL holds {} frames that cannot be copied yet: a reader holds an \
                         old snapshot (it grows until that reader ends)",
                        tail.frames - tail.copied
                    );
                }
            }
        }
        if self.untruncated && now.duration_since(self.last_commit) >= WAL_IDLE {
            // The copy and its fsync first, without the lane: the TRUNCATE that holds it
            // then only cuts the file (an append arriving now waits for that alone).
            checkpoint(&self.conn, "PASSIVE")?;
            let done = self.checkpoint_holding_lane(shared, "TRUNCATE")?;
            if !done.busy {
                self.untruncated = false;
                self.unchecked = false;
            }
        }
        Ok(())
    }
}

/// What `PRAGMA wal_checkpoint` answered.
#[derive(Clone, Copy, Debug)]
pub struct CheckpointOutcome {
    /// It could not finish (a reader or writer was in the way).
    pub busy: bool,
    /// Frames in the WAL.
    pub frames: i64,
    /// Frames copied into the database.
    pub copied: i64,
}

/// Runs one checkpoint of `mode` (a fixed word, never client text).
pub fn checkpoint(conn: &Connection, mode: &str) -> Result<CheckpointOutcome> {
    let outcome = conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
        Ok(CheckpointOutcome {
            busy: r.get::<_, i64>(0)? != 0,
            frames: r.get(1)?,
            copied: r.get(2)?,
        })
    });
    match outcome {
        Err(rusqlite::Error::SqliteFailure(f, _))
            if f.code == rusqlite::ErrorCode::DatabaseBusy =>
        {
            Ok(CheckpointOutcome {
                busy: true,
                frames: -1,
                copied: -1,
            })
        }
        other => Ok(other?),
    }
}
