//! The PostgreSQL store (SPEC §16): the same operations as the SQLite store, on a
//! `postgres://` URL, behind the same seam ([`super::seam`]).
//!
//! Two pools of connections (r2d2): one for write transactions, one for reads, so slow
//! reads (a search over huge messages, many at once) can never take the connections a
//! running answer needs for its checkpoints and end record. PostgreSQL has no
//! single-writer rule (MVCC), so each [`super::Store::write`] is one transaction on a
//! connection of its own, and a session's `seq` is serialised by locking its row
//! ([`write`]). Reads run under a `statement_timeout` ([`READ_TIMEOUT`]): a read past it
//! is [`StoreError::ReadTimeout`], and its connection is free again. A connection that
//! died unseen (a restart) is replaced and the read or write run once more only when that
//! cannot write twice, else [`StoreError::Unavailable`] ([`retry`]). Migrations
//! (`migrations/postgres`) run at open under an advisory lock, so
//! servers starting together do not race. A read-only open migrates nothing and its
//! connections refuse writes (`default_transaction_read_only`). TLS is used when the URL
//! asks for it (`sslmode=prefer|require`), verified against the Mozilla roots; no
//! `sslmode` means none, as `sslmode=disable`.

pub mod coord;
#[cfg(test)]
mod fixture;
pub mod ledger;
pub mod list;
pub mod read;
pub mod retry;
#[cfg(test)]
mod retry_tests;
pub mod rows;
pub mod snippet;
#[cfg(test)]
pub mod testdb;
mod tree;
pub mod write;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use postgres::config::SslMode;
use postgres::{Client, Config};
use r2d2_postgres::PostgresConnectionManager;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::ledger::UsageReport;
use super::list::{ListQuery, SearchHit, SearchQuery, SessionPage};
use super::schema::{HISTORY_TABLE, newest_of};
use super::seam::{Backend, Rerun, Writer};
use crate::clock::Clock;
use crate::config;
use crate::session::events::{Event, SessionId};
use crate::session::projection::page::Page;
use crate::session::store::error::{Result, StoreError};
use crate::session::store::types::{OlderSchema, SessionRow, StoreOptions};

mod embedded {
    refinery::embed_migrations!("migrations/postgres");
}

/// The advisory lock key migrations run under (any fixed number; "brain_mg" in ASCII).
pub const MIGRATION_LOCK_KEY: i64 = 0x6272_6169_6e5f_6d67;

/// Connections of the write pool: writes have no lane here, each takes a connection for
/// its transaction. Reads never take these.
pub const WRITE_CONNECTIONS: u32 = 8;

/// The longest one read statement may run (`statement_timeout` on the read pool's
/// connections) before PostgreSQL cancels it: a read holds its connection no longer.
pub const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The longest a write waits for a lock another transaction holds (`lock_timeout` on the
/// write pool's connections): a table locked by an operator, or a stuck transaction, fails
/// the write with an error within the turn's persist deadline (SPEC §6) instead of hanging
/// the request. Writes themselves are short; they wait only on others' locks.
pub const WRITE_LOCK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// PostgreSQL's code for a statement cancelled by `statement_timeout`.
const QUERY_CANCELED: &str = "57014";

type Tls = MakeRustlsConnect;
type Manager = PostgresConnectionManager<Tls>;

/// The event log in one PostgreSQL database.
pub struct PgStore {
    /// Read connections (under [`READ_TIMEOUT`]).
    reads: r2d2::Pool<Manager>,
    /// Write transactions' connections, never taken by a read.
    writes: r2d2::Pool<Manager>,
    /// How the pools connect, for a fresh connection outside them ([`retry`]).
    fresh_reads: Config,
    fresh_writes: Config,
    tls: Tls,
    clock: Clock,
    /// The URL without its password, for messages.
    shown: PathBuf,
    read_only: bool,
}

impl PgStore {
    /// Connects to the database at `url`, brings its schema up to date under the
    /// migration lock, and refuses a schema newer than this binary.
    pub fn open(url: &str, options: StoreOptions) -> Result<PgStore> {
        PgStore::open_with_read_timeout(url, options, READ_TIMEOUT)
    }

    /// [`PgStore::open`] with reads cancelled after `read_timeout` (tests use a short one).
    pub fn open_with_read_timeout(
        url: &str,
        options: StoreOptions,
        read_timeout: std::time::Duration,
    ) -> Result<PgStore> {
        let config = parse(url, false)?;
        let tls = tls()?;
        let mut client = connect(&config, &tls, url)?;
        migrate(&mut client)?;
        drop(client);
        PgStore::with_pools(url, config, tls, options, false, read_timeout)
    }

    /// Connects for reading only: nothing is migrated, every connection refuses writes.
    /// Refuses a schema newer than this binary and, unless `older` accepts it, an older
    /// one (as the SQLite store does).
    pub fn open_read_only(url: &str, options: StoreOptions, older: OlderSchema) -> Result<PgStore> {
        let config = parse(url, true)?;
        let tls = tls()?;
        let mut client = connect(&config, &tls, url)?;
        let found = current_version(&mut client)?;
        let supported = latest_version();
        if found > supported {
            return Err(StoreError::SchemaTooNew { found, supported });
        }
        if found < supported && older == OlderSchema::Refuse {
            return Err(StoreError::SchemaTooOldServer { found, supported });
        }
        drop(client);
        PgStore::with_pools(url, config, tls, options, true, READ_TIMEOUT)
    }

    fn with_pools(
        url: &str,
        config: Config,
        tls: MakeRustlsConnect,
        options: StoreOptions,
        read_only: bool,
        read_timeout: std::time::Duration,
    ) -> Result<PgStore> {
        let mut read_config = config.clone();
        let timeout = format!("-c statement_timeout={}", read_timeout.as_millis().max(1));
        read_config.options(&match config.get_options() {
            Some(o) => format!("{o} {timeout}"),
            None => timeout,
        });
        let mut write_config = config.clone();
        let lock_wait = format!("-c lock_timeout={}", WRITE_LOCK_TIMEOUT.as_millis());
        write_config.options(&match config.get_options() {
            Some(o) => format!("{o} {lock_wait}"),
            None => lock_wait,
        });
        // Connections open as they are needed: the open above already proved the URL.
        let reads = r2d2::Pool::builder()
            .max_size(options.readers.max(1))
            .min_idle(Some(0))
            .connection_timeout(config::READER_WAIT)
            .build(PostgresConnectionManager::new(
                read_config.clone(),
                tls.clone(),
            ))?;
        let writes = r2d2::Pool::builder()
            .max_size(if read_only { 1 } else { WRITE_CONNECTIONS })
            .min_idle(Some(0))
            .connection_timeout(config::READER_WAIT)
            // No `simple_query("")` round trip before every read and write: a connection
            // the server dropped fails the one call that meets it, and r2d2 discards it
            // as broken (`is_closed`) when it comes back.
            .test_on_check_out(false)
            .build(PostgresConnectionManager::new(
                write_config.clone(),
                tls.clone(),
            ))?;
        Ok(PgStore {
            reads,
            writes,
            fresh_reads: read_config,
            fresh_writes: write_config,
            tls,
            clock: options.clock,
            shown: PathBuf::from(without_password(url)),
            read_only,
        })
    }

    /// The coordinator of the servers sharing the database at `url` (SPEC §16), its
    /// connections opened as the store's are: the same config and TLS (`sslmode`).
    pub fn coordinator(url: &str) -> Result<coord::PgCoordinator> {
        let config = parse(url, false)?;
        let tls = tls()?;
        coord::PgCoordinator::with_connector(Arc::new(move || config.connect(tls.clone()))).map_err(
            |e| match e {
                StoreError::Postgres(source) => StoreError::Connect {
                    url: without_password(url),
                    source,
                },
                other => other,
            },
        )
    }

    /// Runs one read on a read connection (again on a fresh one if that one was lost,
    /// [`retry`]); a statement cancelled by [`READ_TIMEOUT`] is
    /// [`StoreError::ReadTimeout`].
    fn read<T>(&self, f: impl FnMut(&mut Client) -> Result<T>) -> Result<T> {
        self.read_retrying(f).map_err(timed_out)
    }

    /// Runs a read of several statements in one read-only `REPEATABLE READ` transaction, so
    /// it sees one moment of the log (as SQLite's reader transactions do).
    fn in_snapshot<T>(
        &self,
        mut f: impl FnMut(&mut postgres::Transaction<'_>) -> Result<T>,
    ) -> Result<T> {
        self.read(|conn| {
            let mut tx = read::snapshot(conn)?;
            let out = f(&mut tx)?;
            tx.commit()?;
            Ok(out)
        })
    }
}

impl Backend for PgStore {
    fn write(&self, rerun: Rerun, f: &mut dyn FnMut(&mut Writer<'_>) -> Result<()>) -> Result<()> {
        if self.read_only {
            return Err(StoreError::ReadOnly);
        }
        self.write_retrying(rerun, f)
    }
    fn session(&self, id: SessionId) -> Result<SessionRow> {
        self.read(|c| read::session(c, id))
    }
    fn last_seq(&self, id: SessionId) -> Result<u64> {
        self.read(|c| read::last_seq(c, id))
    }
    fn events(&self, id: SessionId, after_seq: u64, limit: Option<u32>) -> Result<Vec<Event>> {
        self.read(|c| read::events(c, id, after_seq, limit))
    }
    fn events_for_context(&self, id: SessionId) -> Result<Vec<Event>> {
        self.in_snapshot(|t| read::events_for_context(t, id))
    }
    fn transcript_page(
        &self,
        id: SessionId,
        before_seq: u64,
        limit: usize,
        active: Option<(u64, u32)>,
    ) -> Result<Page> {
        self.in_snapshot(|t| read::transcript_page(t, id, before_seq, limit, active))
    }
    fn permission_events(&self, id: SessionId, call_id: &str) -> Result<Vec<Event>> {
        self.read(|c| read::permission_events(c, id, call_id))
    }
    fn questions_filed(&self) -> Result<Vec<(SessionId, Event)>> {
        self.read(read::questions_filed)
    }
    fn session_ids(&self) -> Result<Vec<SessionId>> {
        self.read(read::session_ids)
    }
    fn list_sessions(&self, q: &ListQuery) -> Result<SessionPage> {
        self.read(|c| list::list_sessions(c, q))
    }
    fn search(&self, q: &SearchQuery) -> Result<Vec<SearchHit>> {
        self.in_snapshot(|t| list::search(t, q))
    }
    fn usage(&self, session: Option<SessionId>) -> Result<UsageReport> {
        self.read(|c| ledger::usage(c, session))
    }
    fn backup_to(&self, _target: &Path) -> Result<()> {
        Err(StoreError::Refused(super::SERVER_BACKUP_REFUSED))
    }
    fn path(&self) -> &Path {
        &self.shown
    }
    fn clock(&self) -> &Clock {
        &self.clock
    }
    fn is_read_only(&self) -> bool {
        self.read_only
    }
    fn schema_version(&self) -> i64 {
        latest_version()
    }
}

/// A read cancelled by `statement_timeout` as [`StoreError::ReadTimeout`]; other errors as
/// they are.
fn timed_out(e: StoreError) -> StoreError {
    match &e {
        StoreError::Postgres(pg) if pg.code().is_some_and(|c| c.code() == QUERY_CANCELED) => {
            StoreError::ReadTimeout
        }
        _ => e,
    }
}

/// The newest schema version this binary knows for PostgreSQL.
pub fn latest_version() -> i64 {
    newest_of(&embedded::migrations::runner())
}

/// The schema version recorded in the database, 0 for a new one.
pub fn current_version(c: &mut Client) -> Result<i64> {
    let has_history: bool = c
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&HISTORY_TABLE])?
        .try_get(0)?;
    if !has_history {
        return Ok(0);
    }
    let version: Option<i32> = c
        .query_one(&format!("SELECT MAX(version) FROM {}", HISTORY_TABLE), &[])?
        .try_get(0)?;
    Ok(version.map_or(0, i64::from))
}

/// Brings the schema up to date under the migration lock (a second brain starting at the
/// same moment waits, then finds nothing left to do); refuses a newer schema.
pub fn migrate(c: &mut Client) -> Result<()> {
    c.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK_KEY])?;
    let migrated = migrate_locked(c);
    let unlocked = c.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK_KEY]);
    migrated?;
    unlocked?;
    Ok(())
}

fn migrate_locked(c: &mut Client) -> Result<()> {
    let found = current_version(c)?;
    let supported = latest_version();
    if found > supported {
        return Err(StoreError::SchemaTooNew { found, supported });
    }
    embedded::migrations::runner()
        .set_abort_divergent(true)
        .run(c)?;
    Ok(())
}

/// The URL as a connection config. No `sslmode` means no TLS (libpq would try it first);
/// a read-only open's sessions refuse every write.
fn parse(url: &str, read_only: bool) -> Result<Config> {
    // The scheme is case-insensitive (RFC 3986), the parser's match on it is not.
    let url = &lowercase_scheme(url);
    let mut config: Config = url.parse().map_err(|source| StoreError::Connect {
        url: without_password(url),
        source,
    })?;
    if !has_param(url, "sslmode") {
        config.ssl_mode(SslMode::Disable);
    }
    // No JIT: a plan whose estimate passes `jit_above_cost` spent ~30 ms compiling for a
    // page's lookups that ran in 1 (brain's statements are short).
    let mut options = String::from("-c jit=off");
    if read_only {
        options.push_str(" -c default_transaction_read_only=on");
    }
    config.options(&options);
    if config.get_application_name().is_none() {
        config.application_name("brain");
    }
    Ok(config)
}

/// `url` with its scheme (before `://`) in lower case.
fn lowercase_scheme(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => format!("{}://{rest}", scheme.to_ascii_lowercase()),
        None => url.to_owned(),
    }
}

fn connect(config: &Config, tls: &MakeRustlsConnect, url: &str) -> Result<Client> {
    config
        .connect(tls.clone())
        .map_err(|source| StoreError::Connect {
            url: without_password(url),
            source,
        })
}

/// rustls with ring (as ureq builds it) and the Mozilla roots.
fn tls() -> Result<MakeRustlsConnect> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|_| StoreError::Refused("TLS is not available in this build"))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// Whether the URL's query string sets `name`.
fn has_param(url: &str, name: &str) -> bool {
    url.split_once('?')
        .is_some_and(|(_, q)| q.split('&').any(|kv| kv.split('=').next() == Some(name)))
}

/// The URL without a password, in the user part or the query string: what messages show.
pub fn without_password(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let authority_end = base[scheme_end..]
        .find('/')
        .map_or(base.len(), |i| scheme_end + i);
    let authority = &base[scheme_end..authority_end];
    let mut out = base[..scheme_end].to_owned();
    match authority.rsplit_once('@') {
        Some((user, host)) => {
            out.push_str(user.split_once(':').map_or(user, |(u, _)| u));
            out.push('@');
            out.push_str(host);
        }
        None => out.push_str(authority),
    }
    out.push_str(&base[authority_end..]);
    if let Some(q) = query {
        let kept: Vec<&str> = q
            .split('&')
            .filter(|kv| kv.split('=').next() != Some("password"))
            .collect();
        if !kept.is_empty() {
            out.push('?');
            out.push_str(&kept.join("&"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    /// Second review #7: `PostgreSQL://…` was taken for PostgreSQL, then refused by the
    /// parser ("invalid connection string").
    #[test]
    fn an_upper_case_scheme_parses() {
        assert!(parse("PostgreSQL://u@h:5/db", false).is_ok());
        assert_eq!(lowercase_scheme("POSTGRES://U@H/Db"), "postgres://U@H/Db");
    }

    use super::*;

    #[test]
    fn messages_show_the_url_without_its_password() {
        assert_eq!(
            without_password("postgres://me:s3cret@db.example:5432/brain?sslmode=require"),
            "postgres://me@db.example:5432/brain?sslmode=require"
        );
        assert_eq!(
            without_password("postgresql://db/brain?user=me&password=x&sslmode=disable"),
            "postgresql://db/brain?user=me&sslmode=disable"
        );
        assert_eq!(without_password("postgres://me@h/db"), "postgres://me@h/db");
        assert_eq!(without_password("postgres://h"), "postgres://h");
    }

    #[test]
    fn the_url_is_parsed_and_sslmode_chooses_tls() {
        let plain = parse("postgres://me@h:5433/brain", false).unwrap();
        assert_eq!(plain.get_ssl_mode(), SslMode::Disable);
        assert_eq!(plain.get_dbname(), Some("brain"));
        assert_eq!(plain.get_ports(), &[5433]);
        assert_eq!(plain.get_options(), Some("-c jit=off"));
        let tls = parse("postgres://me@h/brain?sslmode=require", false).unwrap();
        assert_eq!(tls.get_ssl_mode(), SslMode::Require);
        let ro = parse("postgres://me@h/brain", true).unwrap();
        assert!(ro.get_options().is_some_and(|o| o.contains("read_only=on")));
        let bad = parse("postgres://me@h/brain?sslmode=sometimes", false).unwrap_err();
        assert!(matches!(bad, StoreError::Connect { .. }), "{bad}");
    }

    /// Review #2: slow reads held every connection of the one pool, and a running
    /// answer's writes failed after waiting ("no database connection available"). Reads
    /// now have a pool of their own: with every read connection taken, a write still
    /// commits at once.
    #[test]
    fn writes_commit_while_reads_hold_every_read_connection() {
        let Some(db) = testdb::fresh("writes_commit_while_reads_hold_every_read_connection") else {
            return;
        };
        let options = StoreOptions {
            readers: 2,
            ..StoreOptions::default()
        };
        let store = PgStore::open(&db.url, options).unwrap();
        let held: Vec<_> = (0..2).map(|_| store.reads.get().unwrap()).collect();
        let started = std::time::Instant::now();
        let store = super::super::Store::from_backend(store);
        let row = store
            .write(|w| w.create_session(None, "sys".into()))
            .unwrap();
        assert!(
            started.elapsed() < config::READER_WAIT / 2,
            "the write waited {:?}",
            started.elapsed()
        );
        drop(held);
        assert_eq!(store.last_seq(row.id).unwrap(), 1);
    }

    /// Second review #4: a send on a table an operator had locked hung until the lock went
    /// (20 s). A write now waits at most [`WRITE_LOCK_TIMEOUT`] for another's lock, then
    /// fails, and the store's next write goes through once the lock is gone.
    #[test]
    fn a_write_waits_for_a_held_lock_no_longer_than_the_lock_timeout() {
        let Some(db) =
            testdb::fresh("a_write_waits_for_a_held_lock_no_longer_than_the_lock_timeout")
        else {
            return;
        };
        let store = super::super::Store::from_backend(
            PgStore::open(&db.url, StoreOptions::default()).unwrap(),
        );
        let id = store.create_session(None, "sys".into()).unwrap().id;
        let mut admin = Client::connect(&db.url, postgres::NoTls).unwrap();
        let mut lock = admin.transaction().unwrap();
        lock.batch_execute("LOCK TABLE session_events IN ACCESS EXCLUSIVE MODE")
            .unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        let writer = std::thread::spawn(move || {
            let outcome = store.append(
                id,
                &crate::session::events::Payload::UserMessage(
                    crate::session::events::UserMessage { text: "hi".into() },
                ),
            );
            let _ = done.send(outcome.is_err());
            store
        });
        // Generous: the lock timeout plus slack for a loaded machine.
        let failed = finished
            .recv_timeout(WRITE_LOCK_TIMEOUT * 3)
            .expect("the write returned while the table stayed locked");
        assert!(failed, "the write succeeded under an exclusive lock");
        lock.rollback().unwrap();
        let store = writer.join().unwrap();
        assert_eq!(store.last_seq(id).unwrap(), 1);
    }

    /// A read past the statement timeout is cancelled by PostgreSQL and answered as
    /// [`StoreError::ReadTimeout`] (503 in the API), its connection free again.
    #[test]
    fn a_read_past_the_statement_timeout_is_a_read_timeout() {
        let Some(db) = testdb::fresh("a_read_past_the_statement_timeout_is_a_read_timeout") else {
            return;
        };
        let store = super::super::Store::from_backend(
            PgStore::open_with_read_timeout(
                &db.url,
                StoreOptions::default(),
                std::time::Duration::from_millis(1),
            )
            .unwrap(),
        );
        let big = "word ".repeat(200_000);
        let id = store
            .write(|w| {
                let row = w.create_session(None, "sys".into())?;
                for _ in 0..20 {
                    w.append(
                        row.id,
                        &crate::session::events::Payload::UserMessage(
                            crate::session::events::UserMessage { text: big.clone() },
                        ),
                    )?;
                }
                Ok(row.id)
            })
            .unwrap();
        let e = store.events(id, 0, None).unwrap_err();
        assert!(matches!(e, StoreError::ReadTimeout), "{e:?}");
        // The write pool has no such limit.
        assert_eq!(store.write(|w| w.events(id)).unwrap().len(), 21);
    }
}
