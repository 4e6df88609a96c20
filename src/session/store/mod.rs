//! The event log (SPEC §3): [`Store`] on either database ([`seam`]), the SQLite store
//! here and the PostgreSQL store in [`pg`].
//!
//! One [`SqliteStore`] owns one database file: a single writer connection that concurrent
//! writers queue for in arrival order and that commits them in groups ([`lane`]; SQLite's
//! own busy handler starves competing writer connections, see FACTS.md), and a pool of
//! reader connections that never block on it (WAL). Every write goes through
//! [`Store::write`], inside a `BEGIN IMMEDIATE` transaction in which `seq` is allocated and
//! the `sessions` cache row is updated, so the cache can never disagree with the log. Read-then-write steps (the one-turn check, compaction's compare-and-append) run
//! inside [`Store::write`] too.
//!
//! **Architecture invariant:** this is the only module that issues SQL.

pub mod coord;
mod key;
mod lane;
pub mod ledger;
pub mod list;
pub mod maintenance;
mod mark;
pub mod pg;
pub mod purge;
mod read;
mod rules;
pub mod schema;
mod seam;
mod tree;
mod write;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags};

pub use ledger::{CallStatus, LedgerEntry, Purpose, UsageReport, UsageTotals};
pub use list::{ListQuery, RANK_WINDOW, SearchHit, SearchOrder, SearchQuery, SessionPage, Syntax};
pub use maintenance::Checkpoints;
pub use pg::PgStore;
pub use seam::{
    AttemptMark, BAD_URL_REFUSED, Backend, DbTarget, KEY_VALUE_REFUSED, Rerun,
    SERVER_BACKUP_REFUSED, Store, WriteTxn, Writer, coordinator, db_file, is_key_value_conninfo,
    is_postgres_url, target,
};
pub use write::SqliteWriter;

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
    #[error(
        "the database's schema (version {found}) is older than this brain's (version \
         {supported}), and this command only reads: run `brain migrate` (with the same --db) \
         to upgrade it first (stop a server running an older brain on it, and take a \
         `brain backup` if you want a way back)"
    )]
    SchemaTooOld { found: i64, supported: i64 },
    /// [`StoreError::SchemaTooOld`] on PostgreSQL, where `brain backup` does not apply.
    #[error(
        "the database's schema (version {found}) is older than this brain's (version \
         {supported}), and this command only reads: run `brain migrate` (with the same --db) \
         to upgrade it first (stop a server running an older brain on it, and take a \
         `pg_dump` if you want a way back)"
    )]
    SchemaTooOldServer { found: i64, supported: i64 },
    #[error(
        "there is no database at {0} (nothing to read; `brain serve`, `brain chat` or \
         `brain migrate` creates one, or pass --db PATH)"
    )]
    NoDatabase(PathBuf),
    #[error("refused: this database was opened read-only")]
    ReadOnly,
    #[error("bad search query: {0}")]
    BadQuery(String),
    #[error("the commit failed, nothing was written: {0}")]
    CommitFailed(String),
    #[error("refused: {0}")]
    Refused(&'static str),
    /// An attempt's append refused: another attempt wrote to the session (seq `seq`) after
    /// the attempt's own newest write, so the session is no longer its own (I7).
    #[error("session {id} is another attempt's now (its event {seq} came after this one's last)")]
    Superseded { id: SessionId, seq: u64 },
    /// The database could not be reached, or its connection was lost with the write not
    /// committed (or not known to be): nothing is known written; try again.
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    #[error("cannot open database {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("PostgreSQL error: {}", pg::detail(.0))]
    Postgres(#[from] postgres::Error),
    #[error("cannot connect to PostgreSQL at {url}: {}", pg::detail(.source))]
    Connect {
        /// Without its password.
        url: String,
        source: postgres::Error,
    },
    /// A read PostgreSQL cancelled at its `statement_timeout` (`pg::READ_TIMEOUT`).
    #[error("the database took too long to answer a read")]
    ReadTimeout,
    #[error("no database connection available: {0}")]
    Pool(#[from] r2d2::Error),
    #[error("migration failed: {0}")]
    Migration(#[from] refinery::Error),
    #[error("the backup at {} failed its integrity check: {check}", .path.display())]
    BackupUnsound { path: PathBuf, check: String },
    #[error("the database holds data this brain cannot read: {0}")]
    Corrupt(String),
    /// An edit of a message that cannot be edited (SPEC §14).
    #[error("that message cannot be edited: {0}")]
    NotEditable(#[from] crate::session::projection::NotEditable),
    /// A fork at a seq it cannot be made at (SPEC §14).
    #[error("cannot fork there: {0}")]
    BadForkPoint(#[from] crate::session::projection::BadForkPoint),
}

impl StoreError {
    /// Why the database is out of reach with nothing known written (it is down, a
    /// connection was lost before the commit), when that is what this error says: the
    /// caller may try again; it is not a bug.
    pub fn out_of_reach(&self) -> Option<String> {
        match self {
            StoreError::Unavailable(why) => Some(why.clone()),
            StoreError::Pool(e) => Some(e.to_string()),
            StoreError::Connect { url, source } => {
                Some(format!("cannot connect to {url}: {}", pg::detail(source)))
            }
            StoreError::Postgres(e) if pg::retry::connection_lost(e) => Some(pg::detail(e)),
            _ => None,
        }
    }
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
    /// Who checkpoints the WAL (writer stores only).
    pub checkpoints: Checkpoints,
}

impl Default for StoreOptions {
    fn default() -> StoreOptions {
        StoreOptions {
            sync: SyncMode::Full,
            clock: Clock::system(),
            readers: config::READER_POOL_SIZE,
            checkpoints: Checkpoints::default(),
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

/// Whether a read-only open accepts a schema older than this binary's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OlderSchema {
    /// Refuse it: queries written for the current schema may not run on it.
    Refuse,
    /// Accept it: for commands that copy the file and read nothing (backup).
    Accept,
}

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
    pub fn write<T>(&self, f: impl FnOnce(&mut SqliteWriter<'_>) -> Result<T>) -> Result<T> {
        let writer = self.writer.as_ref().ok_or(StoreError::ReadOnly)?;
        writer.write(|conn| f(&mut SqliteWriter::new(conn, &self.clock)))
    }

    /// A consistent copy of the whole database at `target` (`VACUUM INTO`), taken while
    /// writers go on. Refuses to overwrite an existing file.
    pub fn backup_to(&self, target: &Path) -> Result<()> {
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

    /// Stops the background purge and checkpoints (at most one batch or checkpoint
    /// later, waiting at most [`maintenance::STOP_WAIT`]). A shutdown calls it; a purge
    /// left unfinished resumes at the next open.
    pub fn stop_maintenance(&self) {
        if let Some(m) = &self.maintenance {
            m.stop_within(maintenance::STOP_WAIT);
        }
    }

    /// The longest a background checkpoint has held the writer so far (benchmarks).
    pub fn longest_checkpoint_hold(&self) -> std::time::Duration {
        self.maintenance
            .as_ref()
            .map_or(std::time::Duration::ZERO, |m| m.longest_hold())
    }

    /// Whether this store was opened with [`Store::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.writer.is_none()
    }

    /// A reader connection from the pool.
    fn reader(&self) -> Result<r2d2::PooledConnection<SqliteConnectionManager>> {
        Ok(self.readers.get()?)
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
