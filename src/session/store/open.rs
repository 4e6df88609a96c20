//! The one opener: what `--db` names ([`DbTarget`]) decides the store ([`Store::open`]),
//! where a lock file lies ([`db_file`]) and how servers coordinate ([`coordinator`]), so
//! the engine and the commands never look at a URL's scheme.

use std::path::Path;
use std::sync::Arc;

use super::coord::{Coordinator, LocalCoordinator};
use super::pg::PgStore;
use super::sqlite::SqliteStore;
use crate::session::store::error::{Result, StoreError};
use crate::session::store::seam::Store;
use crate::session::store::types::{OlderSchema, StoreOptions};

/// What `--db` names: a SQLite file, or a PostgreSQL server by URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DbTarget<'a> {
    Sqlite(&'a Path),
    Postgres(&'a str),
    /// A libpq `key=value` connection string (`host=… dbname=…`): meant for PostgreSQL,
    /// but brain takes only URLs, and opening it as a SQLite file would name a file after
    /// its password. Refused ([`KEY_VALUE_REFUSED`]), never echoed.
    KeyValue,
    /// Text that starts like a PostgreSQL URL but is not one (`postgres:/db`,
    /// `postgres//host/db`): a typo, which as a path would quietly make a SQLite file.
    /// Refused ([`BAD_URL_REFUSED`]), never echoed (it may hold a password).
    BadUrl,
}

impl<'a> DbTarget<'a> {
    /// A `postgres://` or `postgresql://` URL names PostgreSQL; a libpq `key=value` string
    /// is [`DbTarget::KeyValue`]; anything else is a path.
    pub fn of(db: &'a Path) -> DbTarget<'a> {
        match db.to_str() {
            Some(url) if is_postgres_url(url) => DbTarget::Postgres(url),
            Some(text) if is_key_value_conninfo(text) => DbTarget::KeyValue,
            Some(text) if looks_like_a_postgres_url(text) => DbTarget::BadUrl,
            _ => DbTarget::Sqlite(db),
        }
    }
}

/// What `--db` names, or the refusal of what it cannot name (a key=value string, a
/// mistyped URL: never echoed, it may hold a password).
pub fn target(db: &Path) -> Result<DbTarget<'_>> {
    match DbTarget::of(db) {
        DbTarget::KeyValue => Err(StoreError::Refused(KEY_VALUE_REFUSED)),
        DbTarget::BadUrl => Err(StoreError::Refused(BAD_URL_REFUSED)),
        named => Ok(named),
    }
}

/// The file `db` names on this machine (SQLite): where its lock file and its MCP servers'
/// records lie beside it. `None` for a database server, which has nothing beside it here.
pub fn db_file(db: &Path) -> Result<Option<&Path>> {
    Ok(match target(db)? {
        DbTarget::Sqlite(path) => Some(path),
        _ => None,
    })
}

/// How this process shares the database `db` names with other servers: through
/// PostgreSQL on a URL (SPEC §16: claims, `/stop` and answers across servers), else alone
/// (the lock file of §12 keeps every other writer out). The one place that decides, so
/// the engine and the commands never look at what `--db` names.
pub fn coordinator(db: &Path) -> Result<Arc<dyn Coordinator>> {
    Ok(match target(db)? {
        DbTarget::Postgres(url) => Arc::new(PgStore::coordinator(url)?),
        _ => Arc::new(LocalCoordinator),
    })
}

/// The refusal of `brain backup` on a database server.
pub const SERVER_BACKUP_REFUSED: &str = "brain backup copies a SQLite file; back up PostgreSQL \
     with pg_dump (for example `pg_dump --format=custom --file=brain.dump URL`)";

/// The refusal of a libpq `key=value` string as `--db` (it never repeats the string: it
/// may hold a password).
pub const KEY_VALUE_REFUSED: &str = "--db looks like a PostgreSQL key=value connection string; \
     brain takes a URL instead: postgres://USER[:PASSWORD]@HOST[:PORT]/DBNAME[?sslmode=…] \
     (or set BRAIN_DB to one)";

/// The refusal of a mistyped PostgreSQL URL as `--db`.
pub const BAD_URL_REFUSED: &str = "--db starts like a PostgreSQL URL but is not one; write it \
     as postgres://USER[:PASSWORD]@HOST[:PORT]/DBNAME (two slashes after the colon)";

/// Whether `db` begins with `postgres` or `postgresql` followed by `:` or `/` (any case):
/// what a PostgreSQL URL with a typo looks like. A real file of that name would need a
/// directory called `postgres:` or `postgres`; write it `./postgres/…` to mean the file.
fn looks_like_a_postgres_url(db: &str) -> bool {
    let lower = db.get(..11).unwrap_or(db).to_ascii_lowercase();
    ["postgresql", "postgres"].iter().any(|scheme| {
        lower
            .strip_prefix(scheme)
            .is_some_and(|rest| rest.starts_with(':') || rest.starts_with('/'))
    })
}

/// libpq's connection keywords that a `key=value` string names its server with.
const LIBPQ_KEYWORDS: [&str; 12] = [
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "sslmode",
    "service",
    "options",
    "application_name",
    "connect_timeout",
];

/// Whether `db` is a libpq `key=value` connection string: some `=` follows one of
/// [`LIBPQ_KEYWORDS`] as a whole word (spaces around the `=` allowed, as libpq allows).
pub fn is_key_value_conninfo(db: &str) -> bool {
    db.match_indices('=').any(|(at, _)| {
        let before = db[..at].trim_end();
        let word = before
            .rsplit(|c: char| c.is_whitespace())
            .next()
            .unwrap_or("");
        LIBPQ_KEYWORDS.contains(&word.to_ascii_lowercase().as_str())
    })
}

/// Whether `db` is a PostgreSQL URL rather than a file path.
pub fn is_postgres_url(db: &str) -> bool {
    let lower = db.get(..13).unwrap_or(db).to_ascii_lowercase();
    lower.starts_with("postgres://") || lower.starts_with("postgresql://")
}

impl Store {
    /// Opens (creating if needed) the database `db` names — a SQLite file, or a
    /// PostgreSQL URL — and brings its schema up to date. Refuses a database whose schema
    /// is newer than this binary.
    pub fn open(db: &Path, options: StoreOptions) -> Result<Store> {
        Ok(match DbTarget::of(db) {
            DbTarget::Sqlite(path) => Store::from_backend(SqliteStore::open(path, options)?),
            DbTarget::Postgres(url) => Store::from_backend(PgStore::open(url, options)?),
            DbTarget::KeyValue => return Err(StoreError::Refused(KEY_VALUE_REFUSED)),
            DbTarget::BadUrl => return Err(StoreError::Refused(BAD_URL_REFUSED)),
        })
    }

    /// Opens an existing database for reading only: nothing is created, migrated or
    /// written (see [`SqliteStore::open_read_only`], [`PgStore::open_read_only`]).
    pub fn open_read_only(db: &Path, options: StoreOptions, older: OlderSchema) -> Result<Store> {
        Ok(match DbTarget::of(db) {
            DbTarget::Sqlite(path) => {
                Store::from_backend(SqliteStore::open_read_only(path, options, older)?)
            }
            DbTarget::Postgres(url) => {
                Store::from_backend(PgStore::open_read_only(url, options, older)?)
            }
            DbTarget::KeyValue => return Err(StoreError::Refused(KEY_VALUE_REFUSED)),
            DbTarget::BadUrl => return Err(StoreError::Refused(BAD_URL_REFUSED)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Second review #7: `postgres:/x`, `postgres:x`, `postgres//host/x` quietly made SQLite
    /// files (`./postgres:/x`…) and migrated them.
    #[test]
    fn a_mistyped_postgres_url_is_refused_without_echoing_it() {
        for db in [
            "postgres:/x",
            "postgres:x",
            "postgres//127.0.0.1/x",
            "PostgreSQL:/u:s3cret@h/x",
            "postgresql:/x",
        ] {
            assert_eq!(DbTarget::of(Path::new(db)), DbTarget::BadUrl, "{db}");
            let e = Store::open(Path::new(db), StoreOptions::default())
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains("postgres://"), "{e}");
            assert!(!e.contains("s3cret"), "{e}");
        }
        for db in ["postgres://h/x", "POSTGRESQL://h/x"] {
            assert!(
                matches!(DbTarget::of(Path::new(db)), DbTarget::Postgres(_)),
                "{db}"
            );
        }
        for path in [
            "postgres.db",
            "postgresdata/brain.db",
            "./postgres/brain.db",
        ] {
            assert_eq!(
                DbTarget::of(Path::new(path)),
                DbTarget::Sqlite(Path::new(path)),
                "{path}"
            );
        }
    }

    /// Review #8: `host=… password=… dbname=…` became a SQLite file named with the
    /// password.
    #[test]
    fn a_libpq_key_value_string_is_refused_without_echoing_it() {
        for db in [
            "host=db.example password=s3cret dbname=brain",
            "dbname = brain user=me",
            "PASSWORD=s3cret",
        ] {
            assert_eq!(DbTarget::of(Path::new(db)), DbTarget::KeyValue, "{db}");
            let e = Store::open(Path::new(db), StoreOptions::default())
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains("postgres://"), "{e}");
            assert!(!e.contains("s3cret") && !e.contains("password="), "{e}");
        }
        for path in [
            "brain.db",
            "/tmp/a=b/brain.db",
            "data/hostname=x.db",
            "x.db",
        ] {
            assert_eq!(
                DbTarget::of(Path::new(path)),
                DbTarget::Sqlite(Path::new(path))
            );
        }
        assert!(matches!(
            DbTarget::of(Path::new("postgres://me@h/db?password=x")),
            DbTarget::Postgres(_)
        ));
    }
}
