//! The SQLite event log (SPEC §3).
//!
//! One [`Store`] owns one database file: a single writer connection that concurrent
//! writers queue for in arrival order and that commits them in groups ([`lane`]; SQLite's
//! own busy handler starves competing writer connections, see FACTS.md), and a pool of
//! reader connections that never block on it (WAL). Every write goes through
//! [`Store::write`], inside a `BEGIN IMMEDIATE` transaction in which `seq` is allocated and
//! the `sessions` cache row is updated, so the cache can never disagree with the log. Read-then-write steps (the one-turn check, compaction's compare-and-append) run
//! inside [`Store::write`] too.
//!
//! **Architecture invariant:** this is the only module that issues SQL.

mod lane;
pub mod ledger;
pub mod list;
mod read;
pub mod schema;
mod write;

use std::path::{Path, PathBuf};

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::Connection;

pub use ledger::{CallStatus, LedgerEntry, Purpose, UsageReport, UsageTotals};
pub use list::{ListQuery, SearchHit, SearchQuery, SessionPage, Syntax};
pub use write::Writer;

use super::events::SessionId;
use crate::clock::Clock;
use crate::config;

/// Everything that can go wrong in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("session {0} not found")]
    SessionNotFound(SessionId),
    #[error("session {0} already exists")]
    AlreadyExists(SessionId),
    #[error(
        "the database's schema (version {found}) is newer than this brain understands \
         (up to version {supported}); run a newer brain"
    )]
    SchemaTooNew { found: i64, supported: i64 },
    #[error("bad search query: {0}")]
    BadQuery(String),
    #[error("the commit failed, nothing was written: {0}")]
    CommitFailed(String),
    #[error("refused: {0}")]
    Refused(&'static str),
    #[error("cannot open database {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("no database connection available: {0}")]
    Pool(#[from] r2d2::Error),
    #[error("migration failed: {0}")]
    Migration(#[from] refinery::Error),
    #[error("the database holds data this brain cannot read: {0}")]
    Corrupt(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// How hard a commit waits for the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncMode {
    /// A committed event survives power loss (fsync on every commit).
    #[default]
    Full,
    /// A committed event survives a process crash; power loss may lose the newest commits.
    Normal,
}

impl SyncMode {
    fn pragma_value(self) -> &'static str {
        match self {
            SyncMode::Full => "FULL",
            SyncMode::Normal => "NORMAL",
        }
    }
}

/// How to open a store.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    pub sync: SyncMode,
    pub clock: Clock,
    pub readers: u32,
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            sync: SyncMode::Full,
            clock: Clock::system(),
            readers: config::READER_POOL_SIZE,
        }
    }
}

/// A session's cache row: what its log says about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionRow {
    pub id: SessionId,
    pub title: Option<String>,
    pub archived: bool,
    pub system: String,
    pub created_at: String,
    pub updated_at: String,
}

/// The event log in one SQLite file.
pub struct Store {
    writer: lane::WriterLane,
    readers: r2d2::Pool<SqliteConnectionManager>,
    clock: Clock,
    path: PathBuf,
}

impl Store {
    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    /// Refuses a database whose schema is newer than this binary.
    pub fn open(path: &Path, options: StoreOptions) -> Result<Store> {
        let open_err = |source| StoreError::Open {
            path: path.to_owned(),
            source,
        };
        let mut writer = Connection::open(path).map_err(open_err)?;
        schema::apply_writer_pragmas(&writer, options.sync)?;
        schema::migrate(&mut writer)?;
        let sync = options.sync;
        let manager = SqliteConnectionManager::file(path)
            .with_init(move |c| schema::apply_reader_pragmas(c, sync));
        let readers = r2d2::Pool::builder()
            .max_size(options.readers.max(1))
            .connection_timeout(config::READER_WAIT)
            // A local file does not go stale like a network socket: skip the per-checkout
            // `SELECT 1` health check (it cost a rare-word search ~40% over raw FTS5).
            .test_on_check_out(false)
            .build(manager)?;
        Ok(Store {
            writer: lane::WriterLane::new(writer),
            readers,
            clock: options.clock,
            path: path.to_owned(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The clock the store stamps events with.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Runs `f` on the writer connection, inside a `BEGIN IMMEDIATE` transaction that is
    /// committed before this returns `Ok` (see [`lane`]: concurrent writers share one
    /// commit). If `f` fails, everything it wrote is rolled back and its error returned.
    /// Writers are served in arrival order. `f` must not call `write` itself.
    pub fn write<T>(&self, f: impl FnOnce(&mut Writer<'_>) -> Result<T>) -> Result<T> {
        self.writer
            .write(|conn| f(&mut Writer::new(conn, &self.clock)))
    }

    /// A consistent copy of the whole database at `target` (`VACUUM INTO`), taken while
    /// writers go on. Refuses to overwrite an existing file.
    pub fn backup_to(&self, target: &Path) -> Result<()> {
        if target.exists() {
            return Err(StoreError::Refused("the backup file already exists"));
        }
        // Its own connection: the pool's are query-only.
        let conn = Connection::open(&self.path).map_err(|source| StoreError::Open {
            path: self.path.clone(),
            source,
        })?;
        conn.busy_timeout(config::BUSY_TIMEOUT)?;
        let target = target.to_string_lossy().into_owned();
        conn.execute("VACUUM INTO ?1", [target])?;
        Ok(())
    }

    /// A reader connection from the pool.
    fn reader(&self) -> Result<r2d2::PooledConnection<SqliteConnectionManager>> {
        Ok(self.readers.get()?)
    }
}
