//! Everything that can go wrong in the store, on either database, and what a PostgreSQL
//! error says (its causes; whether its connection is gone).

use std::path::PathBuf;

use crate::session::events::SessionId;

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
    #[error("PostgreSQL error: {}", detail(.0))]
    Postgres(#[from] postgres::Error),
    #[error("cannot connect to PostgreSQL at {url}: {}", detail(.source))]
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
                Some(format!("cannot connect to {url}: {}", detail(source)))
            }
            StoreError::Postgres(e) if connection_lost(e) => Some(detail(e)),
            _ => None,
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A PostgreSQL error with its causes: the crate's own text is often only "db error" or
/// "error performing TLS handshake", the server's message is in its source.
pub fn detail(e: &postgres::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// Whether `e` says the connection is gone: closed, a socket error, the server ending the
/// session (`57P01` admin shutdown, `57P02` crash, `57P03` starting up), or a connection
/// exception (SQLSTATE class `08`).
pub fn connection_lost(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        let code = code.code();
        return code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03");
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<std::io::Error>() {
            return true;
        }
        source = s.source();
    }
    false
}
