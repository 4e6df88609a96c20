//! The seam between brain and its database: one [`Store`] whatever runs underneath, SQLite
//! ([`SqliteStore`], a file) or PostgreSQL ([`PgStore`], a `postgres://` URL), chosen by
//! what `--db` names ([`DbTarget`]). Projections, compactor, engine, API and import see only
//! [`Store`] and the write transaction [`Writer`].
//!
//! Two object-safe traits, because the two stores share no connection type: [`Backend`]
//! (the reads, and the door to a write transaction) and [`WriteTxn`] (today's writer
//! operations). An enum would put a `match` in every one of ~25 operations and make every
//! new backend edit them all; with the traits each store implements them beside its SQL.
//! [`Store::write`] stays generic over its closure's output: the `FnOnce` and its value are
//! carried through one `&mut dyn FnMut` call, so `store.write(|w| w.append(..))` reads as
//! before.

use std::path::Path;
use std::sync::Arc;

use super::coord::{Coordinator, LocalCoordinator};

use super::ledger::{LedgerEntry, UsageReport};
use super::list::{ListQuery, SearchHit, SearchQuery, SessionPage};
pub use super::mark::AttemptMark;
use super::pg::PgStore;
use super::{OlderSchema, Result, SessionRow, SqliteStore, StoreError, StoreOptions};
use crate::clock::Clock;
use crate::session::events::{Event, Payload, QuestionKey, SessionId, TitledBy};
use crate::session::projection::page::Page;

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

/// The open write transaction, handed to the closure given to [`Store::write`]: every
/// operation runs in it and is committed with it (or none is).
pub type Writer<'a> = dyn WriteTxn + 'a;

/// What a write transaction can do, on either store. See the SQLite store's
/// [`SqliteWriter`] for each operation's contract; the PostgreSQL store keeps the same.
pub trait WriteTxn {
    /// Creates a session and its `session_started` event (seq 1) together.
    fn create_session(&mut self, title: Option<String>, system: String) -> Result<SessionRow>;
    /// Appends one event with the next seq, updating the session's cache row.
    fn append(&mut self, id: SessionId, payload: &Payload) -> Result<Event>;
    /// Renames a session; the title it already has writes nothing.
    fn rename(&mut self, id: SessionId, title: String, by: TitledBy) -> Result<SessionRow>;
    /// Archives or unarchives a session; the state it is in writes nothing.
    fn set_archived(&mut self, id: SessionId, archived: bool) -> Result<SessionRow>;
    /// Moves the session's `updated_at` to now.
    fn touch(&mut self, id: SessionId) -> Result<()>;
    /// The session's cache row, as of this transaction.
    fn session(&mut self, id: SessionId) -> Result<SessionRow>;
    /// The seq of the newest `compaction_applied` or `rewind` (0 without one).
    fn newest_shaping_seq(&mut self, id: SessionId) -> Result<u64>;
    /// The session's newest seq (0 without events).
    fn last_seq(&mut self, id: SessionId) -> Result<u64>;
    /// Whether the session exists, as of this transaction.
    fn exists(&mut self, id: SessionId) -> Result<bool>;
    /// Every event of the session, as of this transaction.
    fn events(&mut self, id: SessionId) -> Result<Vec<Event>>;
    /// The session's events after `after_seq`, oldest first, as of this transaction (on
    /// PostgreSQL with the session's row locked, so no other append comes in between).
    fn events_after(&mut self, id: SessionId, after_seq: u64) -> Result<Vec<Event>>;
    /// Appends `payload` for the running attempt `mark`, unless another attempt wrote to
    /// the session after the attempt's own newest write ([`StoreError::Superseded`]): I7
    /// across servers checked in the append's own transaction, so an attempt that lost its
    /// session between its claim check and this write lands nothing.
    fn append_for(
        &mut self,
        mark: &AttemptMark,
        id: SessionId,
        payload: &Payload,
    ) -> Result<Event> {
        let later = self.events_after(id, mark.after)?;
        if let Some(e) = later.iter().find(|e| mark.superseded_by(e)) {
            return Err(StoreError::Superseded { id, seq: e.seq });
        }
        self.append(id, payload)
    }
    /// Imports a whole session's log byte for byte (export's other half).
    fn import_session(&mut self, id: SessionId, events: &[Event]) -> Result<()>;
    /// Appends imported events that continue the session's seqs exactly.
    fn extend_imported(&mut self, id: SessionId, events: &[Event]) -> Result<()>;
    /// Deletes a whole session (its ledger rows stay).
    fn delete_session(&mut self, id: SessionId) -> Result<()>;
    /// Edits the user message at `edited_seq`: a `rewind` and the new message (SPEC §14).
    fn edit(&mut self, id: SessionId, edited_seq: u64, text: &str) -> Result<Event>;
    /// Forks `source` into a new session (SPEC §14).
    fn fork(
        &mut self,
        source: SessionId,
        through: Option<u64>,
        active: Option<(u64, u32)>,
        upto: u64,
    ) -> Result<SessionRow>;
    /// Records a provider call; returns its ledger id.
    fn record_call(&mut self, e: &LedgerEntry) -> Result<i64>;
    /// Removes what the session filed for the restart recovery up to `through` (V16):
    /// every question up to there has its answer.
    fn questions_checked(&mut self, id: SessionId, through: u64) -> Result<()>;
}

/// Whether a write's closure may run a second time (see [`Backend::write`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rerun {
    Allowed,
    Never,
}

/// One store's side of the seam: its reads, and a write transaction.
pub trait Backend: Send + Sync {
    /// Runs `f` in one write transaction, committed before this returns `Ok`; rolled back
    /// (everything `f` wrote) when `f` fails. With [`Rerun::Allowed`], a store whose
    /// connection can die under it (PostgreSQL) runs `f` once more on a fresh one when the
    /// first transaction surely did not commit.
    fn write(&self, rerun: Rerun, f: &mut dyn FnMut(&mut Writer<'_>) -> Result<()>) -> Result<()>;
    fn session(&self, id: SessionId) -> Result<SessionRow>;
    fn last_seq(&self, id: SessionId) -> Result<u64>;
    fn events(&self, id: SessionId, after_seq: u64, limit: Option<u32>) -> Result<Vec<Event>>;
    fn events_for_context(&self, id: SessionId) -> Result<Vec<Event>>;
    fn transcript_page(
        &self,
        id: SessionId,
        before_seq: u64,
        limit: usize,
        active: Option<(u64, u32)>,
    ) -> Result<Page>;
    fn permission_events(&self, id: SessionId, call_id: &str) -> Result<Vec<Event>>;
    fn questions_filed(&self) -> Result<Vec<(SessionId, Event)>>;
    fn session_ids(&self) -> Result<Vec<SessionId>>;
    fn list_sessions(&self, q: &ListQuery) -> Result<SessionPage>;
    fn search(&self, q: &SearchQuery) -> Result<Vec<SearchHit>>;
    fn usage(&self, session: Option<SessionId>) -> Result<UsageReport>;
    fn backup_to(&self, target: &Path) -> Result<()>;
    fn path(&self) -> &Path;
    fn clock(&self) -> &Clock;
    fn is_read_only(&self) -> bool;

    // Background maintenance (SQLite's purge of deleted sessions and WAL checkpoints;
    // PostgreSQL deletes at once and checkpoints itself, so these do nothing there).
    /// Wakes the purge after a delete.
    fn purge_soon(&self) {}
    /// Stops the maintenance thread (shutdown), after at most one batch or checkpoint.
    fn stop_maintenance(&self) {}
    /// How many deleted sessions still wait for their purge.
    fn pending_purges(&self) -> Result<usize> {
        Ok(0)
    }
    /// The SQLite store underneath, for benchmarks of its maintenance.
    fn as_sqlite(&self) -> Option<&SqliteStore> {
        None
    }
}

/// The event log, on whichever database `--db` names.
pub struct Store {
    backend: Box<dyn Backend>,
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

    /// A store on the given backend.
    pub fn from_backend(backend: impl Backend + 'static) -> Store {
        Store {
            backend: Box::new(backend),
        }
    }

    /// The database: its file, or its URL without the password (for messages).
    pub fn path(&self) -> &Path {
        self.backend.path()
    }

    /// The clock the store stamps events with.
    pub fn clock(&self) -> &Clock {
        self.backend.clock()
    }

    /// Whether this store was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.backend.is_read_only()
    }

    /// Runs `f` inside one write transaction that is committed before this returns `Ok`.
    /// If `f` fails, everything it wrote is rolled back and its error returned. `f` must
    /// not call `write` itself. `f` may run twice: when the database connection was lost
    /// before the first run's transaction committed (PostgreSQL), it runs once more on a
    /// fresh connection (its effects outside the transaction should bear that).
    pub fn write<T>(&self, mut f: impl FnMut(&mut Writer<'_>) -> Result<T>) -> Result<T> {
        let mut out = None;
        self.backend.write(Rerun::Allowed, &mut |w| {
            out = Some(f(w)?);
            Ok(())
        })?;
        out.ok_or(StoreError::Refused(
            "a write committed without running its closure",
        ))
    }

    /// [`Store::write`] for a closure that runs at most once (it consumes what it writes,
    /// an import's stream): a connection lost after it ran is
    /// [`StoreError::Unavailable`], never a second run.
    pub fn write_once<T>(&self, f: impl FnOnce(&mut Writer<'_>) -> Result<T>) -> Result<T> {
        let mut f = Some(f);
        let mut out = None;
        self.backend.write(Rerun::Never, &mut |w| {
            let f = f
                .take()
                .ok_or(StoreError::Refused("a write ran its closure twice"))?;
            out = Some(f(w)?);
            Ok(())
        })?;
        out.ok_or(StoreError::Refused(
            "a write committed without running its closure",
        ))
    }

    /// A consistent copy of the whole database at `target` (SQLite only; PostgreSQL's is
    /// `pg_dump`).
    pub fn backup_to(&self, target: &Path) -> Result<()> {
        self.backend.backup_to(target)
    }

    /// A session's cache row.
    pub fn session(&self, id: SessionId) -> Result<SessionRow> {
        self.backend.session(id)
    }

    /// The session's newest seq (0 for none), never waiting for a writer.
    pub fn last_seq(&self, id: SessionId) -> Result<u64> {
        self.backend.last_seq(id)
    }

    /// A session's events with `seq > after_seq`, oldest first, at most `limit`.
    pub fn events(&self, id: SessionId, after_seq: u64, limit: Option<u32>) -> Result<Vec<Event>> {
        self.backend.events(id, after_seq, limit)
    }

    /// What the LLM context needs (SPEC §4 steps 0 and 1).
    pub fn events_for_context(&self, id: SessionId) -> Result<Vec<Event>> {
        self.backend.events_for_context(id)
    }

    /// One page of the UI transcript (SPEC §7).
    pub fn transcript_page(
        &self,
        id: SessionId,
        before_seq: u64,
        limit: usize,
        active: Option<(u64, u32)>,
    ) -> Result<Page> {
        self.backend.transcript_page(id, before_seq, limit, active)
    }

    /// The permission questions about `call_id` in a session and their answers, in seq
    /// order.
    pub fn permission_events(&self, id: SessionId, call_id: &str) -> Result<Vec<Event>> {
        self.backend.permission_events(id, call_id)
    }

    /// The keys of the questions and answers filed since the restart recovery last
    /// checked them, in every live session: one session's keys after another's, each
    /// session's in seq order. Each key is its decoded event's (the table says only where
    /// to look), so the recovery pairs exactly as the transcript does.
    pub fn questions_to_check(&self) -> Result<Vec<(SessionId, QuestionKey)>> {
        let mut keys: Vec<(SessionId, QuestionKey)> = self
            .questions_filed()?
            .iter()
            .map(|(id, e)| (*id, QuestionKey::of(e)))
            .collect();
        keys.sort_unstable_by_key(|(id, k)| (*id, k.seq));
        Ok(keys)
    }

    /// The questions and answers filed since the restart recovery last checked them, as
    /// events, in no particular order (what [`Store::questions_to_check`] keys).
    pub fn questions_filed(&self) -> Result<Vec<(SessionId, Event)>> {
        self.backend.questions_filed()
    }

    /// Removes, for each (session, seq), what the session filed up to that seq: the
    /// recovery found every question up to there answered. One transaction.
    pub fn questions_checked(&self, checked: &[(SessionId, u64)]) -> Result<()> {
        if checked.is_empty() {
            return Ok(());
        }
        self.write(|w| {
            for &(id, through) in checked {
                w.questions_checked(id, through)?;
            }
            Ok(())
        })
    }

    /// Every session id, oldest first (tests and export).
    pub fn session_ids(&self) -> Result<Vec<SessionId>> {
        self.backend.session_ids()
    }

    /// A page of sessions, newest first by `(updated_at, id)`.
    pub fn list_sessions(&self, q: &ListQuery) -> Result<SessionPage> {
        self.backend.list_sessions(q)
    }

    /// Messages, answers, partials, summaries and titles matching a query.
    pub fn search(&self, q: &SearchQuery) -> Result<Vec<SearchHit>> {
        self.backend.search(q)
    }

    /// Deletes a whole session: at once as far as anyone can see (SQLite then purges its
    /// events in the background, PostgreSQL deletes them in this transaction).
    pub fn delete_session(&self, id: SessionId) -> Result<()> {
        self.write(|w| w.delete_session(id))?;
        self.backend.purge_soon();
        Ok(())
    }

    /// Stops background maintenance (shutdown); a pending purge resumes at next open.
    pub fn stop_maintenance(&self) {
        self.backend.stop_maintenance();
    }

    /// How many deleted sessions still wait for their purge (tests and benchmarks).
    pub fn pending_purges(&self) -> Result<usize> {
        self.backend.pending_purges()
    }

    /// The SQLite store underneath, when it is one (benchmarks of its maintenance).
    pub fn as_sqlite(&self) -> Option<&SqliteStore> {
        self.backend.as_sqlite()
    }

    /// Records a provider call; returns its ledger id.
    pub fn record_call(&self, e: &LedgerEntry) -> Result<i64> {
        self.write(|w| w.record_call(e))
    }

    /// Usage sums for one session (its rows outlive it), or for everything.
    pub fn usage(&self, session: Option<SessionId>) -> Result<UsageReport> {
        self.backend.usage(session)
    }
}

impl Backend for SqliteStore {
    // One local file: no connection dies under a write, nothing is ever run twice.
    fn write(&self, _: Rerun, f: &mut dyn FnMut(&mut Writer<'_>) -> Result<()>) -> Result<()> {
        SqliteStore::write(self, |w| f(w))
    }
    fn session(&self, id: SessionId) -> Result<SessionRow> {
        SqliteStore::session(self, id)
    }
    fn last_seq(&self, id: SessionId) -> Result<u64> {
        SqliteStore::last_seq(self, id)
    }
    fn events(&self, id: SessionId, after_seq: u64, limit: Option<u32>) -> Result<Vec<Event>> {
        SqliteStore::events(self, id, after_seq, limit)
    }
    fn events_for_context(&self, id: SessionId) -> Result<Vec<Event>> {
        SqliteStore::events_for_context(self, id)
    }
    fn transcript_page(
        &self,
        id: SessionId,
        before_seq: u64,
        limit: usize,
        active: Option<(u64, u32)>,
    ) -> Result<Page> {
        SqliteStore::transcript_page(self, id, before_seq, limit, active)
    }
    fn permission_events(&self, id: SessionId, call_id: &str) -> Result<Vec<Event>> {
        SqliteStore::permission_events(self, id, call_id)
    }
    fn questions_filed(&self) -> Result<Vec<(SessionId, Event)>> {
        SqliteStore::questions_filed(self)
    }
    fn session_ids(&self) -> Result<Vec<SessionId>> {
        SqliteStore::session_ids(self)
    }
    fn list_sessions(&self, q: &ListQuery) -> Result<SessionPage> {
        SqliteStore::list_sessions(self, q)
    }
    fn search(&self, q: &SearchQuery) -> Result<Vec<SearchHit>> {
        SqliteStore::search(self, q)
    }
    fn usage(&self, session: Option<SessionId>) -> Result<UsageReport> {
        SqliteStore::usage(self, session)
    }
    fn backup_to(&self, target: &Path) -> Result<()> {
        SqliteStore::backup_to(self, target)
    }
    fn path(&self) -> &Path {
        SqliteStore::path(self)
    }
    fn clock(&self) -> &Clock {
        SqliteStore::clock(self)
    }
    fn is_read_only(&self) -> bool {
        SqliteStore::is_read_only(self)
    }
    fn purge_soon(&self) {
        SqliteStore::purge_soon(self)
    }
    fn stop_maintenance(&self) {
        SqliteStore::stop_maintenance(self)
    }
    fn pending_purges(&self) -> Result<usize> {
        SqliteStore::pending_purges(self)
    }
    fn as_sqlite(&self) -> Option<&SqliteStore> {
        Some(self)
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
