//! The event log in one SQLite file: the store, its [`Backend`] over the statements in
//! [`read`], [`list`] and [`ledger`], and its writer ([`write`], [`tree`]).
//!
//! One [`SqliteStore`] owns one database file: a single writer connection that concurrent
//! writers queue for in arrival order and that commits them in groups ([`lane`]; SQLite's
//! own busy handler starves competing writer connections, as measured), and a pool of
//! reader connections that never block on it (WAL). Every write runs inside a `BEGIN
//! IMMEDIATE` transaction in which `seq` is allocated and the `sessions` cache row is
//! updated, so the cache can never disagree with the log. Read-then-write steps (the
//! one-turn check, compaction's compare-and-append) run inside one write too.

mod key;
mod lane;
mod ledger;
mod list;
pub mod maintenance;
pub mod purge;
mod read;
pub mod schema;
mod tree;
mod write;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags};

pub use write::SqliteWriter;

use crate::clock::Clock;
use crate::config;
use crate::session::events::{Event, SessionId};
use crate::session::projection::page::Page;
use crate::session::store::error::{Result, StoreError};
use crate::session::store::ledger::UsageReport;
use crate::session::store::list::{ListQuery, SearchHit, SearchQuery, SessionPage};
use crate::session::store::seam::{Backend, Rerun, Writer};
use crate::session::store::types::{OlderSchema, SessionRow, StoreOptions};

/// The event log in one SQLite file.
pub struct SqliteStore {
    /// `None` when opened read-only.
    writer: Option<Arc<lane::WriterLane>>,
    /// Purges and checkpoints in the background; `None` when opened read-only.
    maintenance: Option<maintenance::Maintenance>,
    readers: r2d2::Pool<SqliteConnectionManager>,
    clock: Clock,
    path: PathBuf,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    /// Refuses a database whose schema is newer than this binary.
    pub fn open(path: &Path, options: StoreOptions) -> Result<Self> {
        let open_err = |source| StoreError::Open {
            path: path.to_owned(),
            source,
        };
        let mut writer = Connection::open(path).map_err(open_err)?;
        schema::apply_writer_pragmas(&writer, options.sync, options.checkpoints)?;
        schema::migrate(&mut writer)?;
        let sync = options.sync;
        let manager = SqliteConnectionManager::file(path)
            .with_init(move |c| schema::apply_reader_pragmas(c, sync));
        let lane = Arc::new(lane::WriterLane::new(writer));
        let own = Connection::open(path).map_err(open_err)?;
        schema::apply_common_pragmas(&own, sync)?;
        let maintenance =
            maintenance::Maintenance::start(Arc::clone(&lane), own, options.checkpoints)?;
        Ok(Self {
            writer: Some(lane),
            maintenance: Some(maintenance),
            readers: reader_pool(manager, &options)?,
            clock: options.clock,
            path: path.to_owned(),
        })
    }

    /// Opens an existing database for reading only: nothing is created, migrated or
    /// written (every connection is `SQLITE_OPEN_READ_ONLY` and `query_only`), so a newer
    /// brain's read-only commands never change a database an older server runs on. Refuses
    /// a missing file, a schema newer than this binary and, unless `older` accepts it, an
    /// older one (with the advice to run `brain migrate`). [`Store::write`] is refused.
    pub fn open_read_only(path: &Path, options: StoreOptions, older: OlderSchema) -> Result<Self> {
        if !path.is_file() {
            return Err(StoreError::NoDatabase(path.to_owned()));
        }
        let conn = open_read_only_connection(path)?;
        let found = schema::current_version(&conn)?;
        let supported = schema::latest_version();
        if found > supported {
            return Err(StoreError::SchemaTooNew { found, supported });
        }
        if found < supported && older == OlderSchema::Refuse {
            return Err(StoreError::SchemaTooOld { found, supported });
        }
        drop(conn);
        let sync = options.sync;
        let manager = SqliteConnectionManager::file(path)
            .with_flags(read_only_flags())
            .with_init(move |c| schema::apply_reader_pragmas(c, sync));
        Ok(Self {
            writer: None,
            maintenance: None,
            readers: reader_pool(manager, &options)?,
            clock: options.clock,
            path: path.to_owned(),
        })
    }

    /// Runs `f` on the writer connection, inside a `BEGIN IMMEDIATE` transaction that is
    /// committed before this returns `Ok` (see [`lane`]: concurrent writers share one
    /// commit). If `f` fails, everything it wrote is rolled back and its error returned.
    /// Writers are served in arrival order. `f` must not call `write` itself.
    pub fn write<T>(&self, f: impl FnOnce(&mut SqliteWriter<'_>) -> Result<T>) -> Result<T> {
        let writer = self.writer.as_ref().ok_or(StoreError::ReadOnly)?;
        writer.write(|conn| f(&mut SqliteWriter::new(conn, &self.clock)))
    }

    /// A reader connection from the pool.
    fn reader(&self) -> Result<r2d2::PooledConnection<SqliteConnectionManager>> {
        Ok(self.readers.get()?)
    }
}

impl Backend for SqliteStore {
    // One local file: no connection dies under a write, nothing is ever run twice.
    fn write(&self, _: Rerun, f: &mut dyn FnMut(&mut Writer<'_>) -> Result<()>) -> Result<()> {
        SqliteStore::write(self, |w| f(w))
    }
    fn session(&self, id: SessionId) -> Result<SessionRow> {
        read::session(&*self.reader()?, id)
    }
    fn last_seq(&self, id: SessionId) -> Result<u64> {
        read::last_seq(&*self.reader()?, id)
    }
    fn events(&self, id: SessionId, after_seq: u64, limit: Option<u32>) -> Result<Vec<Event>> {
        read::events(&mut *self.reader()?, id, after_seq, limit)
    }
    fn events_for_context(&self, id: SessionId) -> Result<Vec<Event>> {
        read::events_for_context(&mut *self.reader()?, id)
    }
    fn transcript_page(
        &self,
        id: SessionId,
        before_seq: u64,
        limit: usize,
        active: Option<(u64, u32)>,
    ) -> Result<Page> {
        read::transcript_page(&mut *self.reader()?, id, before_seq, limit, active)
    }
    fn permission_events(&self, id: SessionId, call_id: &str) -> Result<Vec<Event>> {
        read::permission_events(&*self.reader()?, id, call_id)
    }
    fn questions_filed(&self) -> Result<Vec<(SessionId, Event)>> {
        read::questions_filed(&*self.reader()?)
    }
    fn session_ids(&self) -> Result<Vec<SessionId>> {
        read::session_ids(&*self.reader()?)
    }
    fn list_sessions(&self, q: &ListQuery) -> Result<SessionPage> {
        list::list_sessions(&*self.reader()?, q)
    }
    fn search(&self, q: &SearchQuery) -> Result<Vec<SearchHit>> {
        list::search(&*self.reader()?, q)
    }
    fn usage(&self, session: Option<SessionId>) -> Result<UsageReport> {
        ledger::usage(&*self.reader()?, session)
    }
    /// A consistent copy of the whole database at `target` (`VACUUM INTO`), taken while
    /// writers go on. Refuses to overwrite an existing file.
    fn backup_to(&self, target: &Path) -> Result<()> {
        if target.exists() {
            return Err(StoreError::Refused("the backup file already exists"));
        }
        // Its own connection: the pool's are query-only, which refuses VACUUM INTO. A
        // read-only one copies the same and cannot change the source.
        let conn = open_read_only_connection(&self.path)?;
        // The copy gets the current page size (and full pages): how a database made with
        // smaller pages gets the compact layout (restore the backup in its place).
        conn.pragma_update(None, "page_size", schema::PAGE_SIZE_BYTES)?;
        let target = target.to_string_lossy().into_owned();
        conn.execute("VACUUM INTO ?1", [&target])?;
        // The copy must open and be whole before it is called a backup.
        let copy = Connection::open(&target)?;
        let check: String = copy.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
        if check != "ok" {
            return Err(StoreError::BackupUnsound {
                path: target.into(),
                check,
            });
        }
        Ok(())
    }
    fn path(&self) -> &Path {
        &self.path
    }
    fn clock(&self) -> &Clock {
        &self.clock
    }
    fn is_read_only(&self) -> bool {
        self.writer.is_none()
    }
    fn schema_version(&self) -> i64 {
        schema::latest_version()
    }
    fn purge_soon(&self) {
        if let Some(m) = &self.maintenance {
            m.purge_soon();
        }
    }
    /// Stops the background purge and checkpoints (at most one batch or checkpoint
    /// later, waiting at most [`maintenance::STOP_WAIT`]). A shutdown calls it; a purge
    /// left unfinished resumes at the next open.
    fn stop_maintenance(&self) {
        if let Some(m) = &self.maintenance {
            m.stop_within(maintenance::STOP_WAIT);
        }
    }
    fn pending_purges(&self) -> Result<usize> {
        Ok(purge::pending(&*self.reader()?)?.len())
    }
    fn longest_checkpoint_hold(&self) -> std::time::Duration {
        self.maintenance
            .as_ref()
            .map_or(std::time::Duration::ZERO, |m| m.longest_hold())
    }
    /// Each batch its own transaction, as the maintenance thread runs them.
    fn purge_pending(&self, batch: i64) -> Result<std::time::Duration> {
        let writer = self.writer.as_ref().ok_or(StoreError::ReadOnly)?;
        let ids = {
            let conn = self.reader()?;
            purge::pending(&conn)?
        };
        let mut longest = std::time::Duration::ZERO;
        for id in ids {
            loop {
                let started = std::time::Instant::now();
                let done = writer.write(|c| purge::purge_batch(c, &id, batch))?;
                longest = longest.max(started.elapsed());
                if done {
                    break;
                }
            }
        }
        Ok(longest)
    }
}

fn reader_pool(
    manager: SqliteConnectionManager,
    options: &StoreOptions,
) -> Result<r2d2::Pool<SqliteConnectionManager>> {
    Ok(r2d2::Pool::builder()
        .max_size(options.readers.max(1))
        .connection_timeout(config::READER_WAIT)
        // A local file does not go stale like a network socket: skip the per-checkout
        // `SELECT 1` health check (it cost a rare-word search ~40% over raw FTS5).
        .test_on_check_out(false)
        .build(manager)?)
}

/// Opens an existing file without the right to change or create it.
fn read_only_flags() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
}

fn open_read_only_connection(path: &Path) -> Result<Connection> {
    let conn = Connection::open_with_flags(path, read_only_flags()).map_err(|source| {
        StoreError::Open {
            path: path.to_owned(),
            source,
        }
    })?;
    conn.busy_timeout(config::BUSY_TIMEOUT)?;
    Ok(conn)
}
