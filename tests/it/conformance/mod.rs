//! One conformance suite for the store (SPEC §16), run against both stores from the same
//! test code: each behaviour is a module of functions taking a [`Db`], and
//! [`conformance!`] instantiates every one of them twice, in `sqlite` (a temporary file)
//! and `postgres` (a fresh database from `BRAIN_TEST_PG_URL`; skipped visibly without
//! one, required under CI).
//!
//! Checks read through the write transaction (`w.events`, `w.session`) where they test the
//! write side, so they hold on either store whatever the read side does; the read side
//! has its own module ([`reads`]).

use std::path::{Path, PathBuf};

use crate::testdb::{self, TestDb};
use brain::clock::Clock;
use brain::session::{Event, SessionId, SessionRow, Store, StoreOptions, SyncMode};

/// Instantiates the listed test functions of the calling module for both stores.
/// `#[ignore = "…"]` (or any attribute) before a name applies to its PostgreSQL instance.
macro_rules! conformance {
    ($($(#[$pg:meta])* $name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    super::$name(&$crate::conformance::Db::sqlite());
                }
            )*
        }
        mod postgres {
            $(
                #[test]
                $(#[$pg])*
                fn $name() {
                    if let Some(db) = $crate::conformance::Db::postgres(stringify!($name)) {
                        super::$name(&db);
                    }
                }
            )*
        }
    };
}

mod appends;
mod cache;
mod cli;
mod delete;
mod ledger;
mod nul;
mod questions;
mod reads;
mod schema;
mod search;
mod search_display;
mod transfer;
mod tree;

/// A database of either kind, removed when dropped.
pub struct Db {
    target: PathBuf,
    _keep: Keep,
}

enum Keep {
    Dir(#[allow(dead_code)] tempfile::TempDir),
    Pg(#[allow(dead_code)] TestDb),
}

impl Db {
    pub fn sqlite() -> Db {
        let dir = tempfile::tempdir().expect("temp dir");
        Db {
            target: dir.path().join("brain.db"),
            _keep: Keep::Dir(dir),
        }
    }

    pub fn postgres(test: &str) -> Option<Db> {
        let db = testdb::fresh(test)?;
        Some(Db {
            target: PathBuf::from(&db.url),
            _keep: Keep::Pg(db),
        })
    }

    /// Another fresh database of the same kind.
    pub fn fresh_like(&self, test: &str) -> Db {
        match self._keep {
            Keep::Dir(_) => Db::sqlite(),
            Keep::Pg(_) => Db::postgres(test).expect("a server, as for the first"),
        }
    }

    pub fn is_postgres(&self) -> bool {
        matches!(self._keep, Keep::Pg(_))
    }

    /// What `--db` takes: the file's path or the URL.
    pub fn target(&self) -> &Path {
        &self.target
    }

    pub fn open(&self) -> Store {
        self.open_with(Clock::system())
    }

    pub fn open_with(&self, clock: Clock) -> Store {
        Store::open(&self.target, options(clock)).expect("open store")
    }

    /// Runs one statement underneath the store (for states the store never makes).
    pub fn raw_execute(&self, sql: &str) {
        match &self._keep {
            Keep::Dir(_) => {
                let c = rusqlite::Connection::open(&self.target).expect("raw connection");
                c.execute_batch(sql).expect("raw statement");
            }
            Keep::Pg(db) => {
                let mut c =
                    postgres::Client::connect(&db.url, postgres::NoTls).expect("raw connection");
                c.batch_execute(sql).expect("raw statement");
            }
        }
    }
}

pub fn options(clock: Clock) -> StoreOptions {
    StoreOptions {
        sync: SyncMode::Normal,
        clock,
        ..StoreOptions::default()
    }
}

/// Every event of the session, read in a write transaction.
pub fn log(store: &Store, id: SessionId) -> Vec<Event> {
    store.write(|w| w.events(id)).expect("events")
}

/// The session's cache row, read in a write transaction.
pub fn row(store: &Store, id: SessionId) -> SessionRow {
    store.write(|w| w.session(id)).expect("session row")
}

pub fn seqs(events: &[Event]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

pub fn new_session(store: &Store) -> SessionId {
    store
        .create_session(Some("t".into()), "be brief".into())
        .expect("create")
        .id
}
